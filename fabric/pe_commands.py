"""A core's commands as packed wavelets (Python ints): the builders the golden model, the host
and the testbenches share (``docs/pe.md``, "Commands"). Each checks its arguments and raises a
``ValueError`` naming the bad one; the layouts are :mod:`rtl.isa`'s."""

import numpy as np

from wse.fabric import numerics
from wse.rtl import isa
from wse.rtl.core_params import CoreParams
from wse.rtl.validate import integer
from wse.rtl.wavelet import pack

__all__ = ["addr", "load", "read", "select", "weight", "cr", "mask", "tokens", "psums"]

_ADDRESS_MAX = (1 << isa.ADDR_ARG.fields["addr"][1]) - 1


def _wavelet(data: int, color: int, ctrl: int = 0) -> int:
    return int(pack(data, color, ctrl))


def addr(params: CoreParams, address: int, *, pairs: bool = False) -> int:
    """ADDR on ``cmd``: load pointer := ``address`` (0..65535); with ``pairs`` each LOAD after
    it writes two words."""
    address = integer("address", address, 0, _ADDRESS_MAX)
    return _wavelet(int(isa.addr_data(address, pairs=pairs)), params.colors.cmd, 1)


def load(params: CoreParams, values, *, pairs: bool = False) -> list[int]:
    """LOADs on ``cmd``, one per operand of ``values`` (flattened row-major, so ``load(p, X)``
    after ``addr(p, 0)`` loads the whole ``X``), or with ``pairs`` one per two operands (after
    an ADDR with ``pairs``; an even number of them). ``ValueError`` if a value is not an
    operand, or ``pairs`` has an odd number."""
    values = numerics.to_wire(params.fmt, numerics.check_operands(params.fmt, np.ravel(values),
                                                                  "values"))
    if not pairs:
        return pack(isa.load_data(values), params.colors.cmd, 0).tolist()
    if values.size % 2:
        raise ValueError(f"LOAD pairs take an even number of values, not {values.size}")
    return pack(isa.load_data(values[0::2], values[1::2]), params.colors.cmd, 0).tolist()


def read(params: CoreParams, address: int, length: int) -> int:
    """READ on ``cmd``: send ``length`` (0..4095) words from ``address`` (0..65535) on
    ``out``."""
    address = integer("address", address, 0, _ADDRESS_MAX)
    length = integer("length", length, 0, isa.MAX_READ)
    return _wavelet(int(isa.read_data(address, length)), params.colors.cmd, 1)


def select(params: CoreParams, col: int | None = None) -> int:
    """SELECT on ``cmd``: the core of column ``col`` (``params.col`` by default) takes the
    ``cmd`` wavelets that follow; the other cores of the row discard them."""
    col = params.col if col is None else integer("col", col, 0, isa.MAX_ARG)
    return _wavelet(int(isa.select_data(col)), params.colors.cmd, 1)


def weight(params: CoreParams, value: int, slot: int) -> int:
    """AXPY on ``weight``: ``ACC += value * X[slot]``. ``slot`` may be any 16-bit number (one
    ``>= n_feat`` is an error the core counts); ``value`` must be an operand."""
    value = int(numerics.to_wire(params.fmt, numerics.check_operands(params.fmt, value, "value")))
    slot = integer("slot", slot, 0, (1 << isa.WEIGHT.fields["slot"][1]) - 1)
    return _wavelet(int(isa.weight_data(value, slot)), params.colors.weight)


def cr(params: CoreParams, o: int, *, raw: bool = False, act: bool = False,
       delta: bool = False, quiet_n: bool = False, quiet_s: bool = False,
       skip: bool = False) -> int:
    """CR on ``weight``: output feature ``o`` (25 bits, ``0 .. isa.MAX_O``) is complete. With
    ``raw`` a ``CR_OUT``: the owner row sends the 32-bit totals on ``out`` instead of
    requantising them into ``Y``. With ``act`` a ``CR_ACT``: the owner row writes the ReLU of
    the requantised result into ``X[o // rows]`` and sends it on ``out``; with ``delta`` a
    ``CR_DELTA``: the same without the ReLU, for every active token, and ``0`` where the gate
    is clear (the ReLU's derivative, in the delta pass). ``quiet_n`` /
    ``quiet_s``: the core's engine takes no psum from the north / south for this output;
    ``skip``: the core hands no buffer over (nothing sent, ``Y`` untouched; its accumulators
    carry into the next output), only its gate is reset (:class:`~rtl.isa.CrArg`)."""
    o = integer("o", o, 0, isa.MAX_O)
    if raw + act + delta > 1:
        raise ValueError("a carriage return is at most one of raw (CR_OUT), act (CR_ACT) and "
                         "delta (CR_DELTA)")
    return _wavelet(int(isa.cr_data(o, raw=raw, act=act, delta=delta, quiet_n=bool(quiet_n),
                                    quiet_s=bool(quiet_s), skip=bool(skip))),
                    params.colors.weight, 1)


def mask(params: CoreParams, chunk: int, bits: int, col: int | None = None, *,
         color: int | None = None) -> int:
    """MASK on ``weight`` (or ``color``): in the core of column ``col`` (``params.col`` by
    default), the gate of local tokens ``16 * chunk + j`` := bit ``j`` of ``bits``, until the
    next carriage return."""
    col = params.col if col is None else integer("col", col, 0, isa.MASK_MAX_COLS - 1)
    chunk = integer("chunk", chunk, 0, isa.MASK_MAX_CHUNKS - 1)
    bits = integer("bits", bits, 0, (1 << isa.MASK_CHUNK) - 1)
    return _wavelet(int(isa.mask_data(col, chunk, bits)),
                    params.colors.weight if color is None else color, 1)


def tokens(params: CoreParams, count: int, *, color: int | None = None) -> int:
    """TOKENS on ``cmd`` (or ``color``): the core's active tokens := ``count`` (``0 .. n_tok``;
    the model and the RTL count a larger one as an error): its gate, then and after every
    carriage return, has the tokens below ``count`` on (:class:`~rtl.isa.TokensArg`)."""
    count = integer("count", count, 0, (1 << isa.TOKENS_ARG.fields["count"][1]) - 1)
    return _wavelet(int(isa.tokens_data(count)),
                    params.colors.cmd if color is None else color, 1)


def psums(color: int, values) -> list[int]:
    """Psum wavelets on ``color``, one per value of ``values`` (32-bit words: signed integers,
    or bit patterns ``0 .. 2**32 - 1``)."""
    words = np.asarray(values, dtype=np.int64) & 0xFFFF_FFFF
    return pack(isa.word_data(np.where(words >> 31 != 0, words - (1 << 32), words)), color,
                0).tolist()
