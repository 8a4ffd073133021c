"""What a core takes from its ramp, as the golden model reads it (``docs/pe.md``, "Selection"
and "Commands"): which wavelets it keeps (:func:`selection`: SELECTs, and the ``cmd`` wavelets
and MASKs of other columns, are not kept) and every field of their data, read every way a
command may be read (:func:`decode_fields`), from the layouts of :mod:`rtl.isa`."""

import numpy as np

from wse.rtl import isa
from wse.rtl.core_params import CoreParams
from wse.rtl.wavelet import ControlOp

__all__ = ["decode_fields", "selection"]

_MASK_COL = isa.MASK_ARG.fields["col"][0]       # where a MASK's col starts in its arg


def decode_fields(data: np.ndarray) -> dict[str, list[int]]:
    """The fields of every way a command's data may be read (:mod:`rtl.isa`), vectorised."""
    control, weight = isa.CONTROL.unpack(data), isa.WEIGHT.unpack(data)
    read = isa.READ_ARG.unpack(control["arg"])
    return {
        "load": isa.LOAD.unpack(data)["value"].tolist(),
        "load_high": isa.LOAD.unpack(data)["high"].tolist(),
        "value": weight["value"].tolist(), "slot": weight["slot"].tolist(),
        "op": control["op"].tolist(),
        "addr": isa.ADDR_ARG.unpack(control["arg"])["addr"].tolist(),
        "pairs": isa.ADDR_ARG.unpack(control["arg"])["pairs"].tolist(),
        "read_addr": read["addr"].tolist(), "read_len": read["len"].tolist(),
        **{("o" if k == "o" else f"cr_{k}"): v.tolist()
           for k, v in isa.CR_ARG.unpack(control["arg"]).items()},
        "col": isa.SELECT_ARG.unpack(control["arg"])["col"].tolist(),
        "chunk": isa.MASK_ARG.unpack(control["arg"])["chunk"].tolist(),
        "bits": isa.MASK_ARG.unpack(control["arg"])["bits"].tolist(),
        "count": isa.TOKENS_ARG.unpack(control["arg"])["count"].tolist(),
    }


def selection(params: CoreParams, selected: int, color, ctrl, op, col):
    """``(kept, selected)``: which of a core's wavelets (their ``color``, ``ctrl``, control
    ``op`` and SELECT ``col`` fields, the latter the whole 28-bit ``arg``, in ramp order) it
    keeps, starting with column ``selected`` selected, and the column selected after them. A
    SELECT on ``cmd`` selects its column and is not kept; other ``cmd`` wavelets are kept only
    while ``params.col`` is selected; a MASK on ``cmd`` or ``weight`` whose column (the top
    bits of the same ``arg``, :class:`~rtl.isa.MaskArg`) is not ``params.col`` is not kept;
    every other wavelet is kept."""
    cmd, mine, kept = params.colors.cmd, params.col, []
    ours = (cmd, params.colors.weight)                  # the colors a MASK is a command on
    for k, o, c, a in zip(color, ctrl, op, col):
        if k == cmd and o and c == ControlOp.SELECT.value:
            selected = a
            kept.append(False)
        elif k in ours and o and c == ControlOp.MASK.value and a >> _MASK_COL != mine:
            kept.append(False)
        else:
            kept.append(k != cmd or selected == mine)
    return kept, selected
