"""The instruction set: every packed payload of the fabric, as Amaranth layouts, and the numpy
encoders and decoders derived from those same layouts.

The hardware reads a payload through a :class:`~amaranth.lib.data.View` of its layout; the
compiler, the golden models and the testbenches pack and unpack it with a :class:`Codec` built
from the same layout, so the two cannot disagree (``tests/test_isa.py`` checks every field both
ways). Nothing else in the project shifts or masks payload bits.

Bit layout (LSB first) of a wavelet's 32 data bits, by what the wavelet is::

    WeightPayload    value[15:0] (signed)  slot[31:16]             data wavelet on ``weight``
    LoadPayload      value[15:0] (signed)  high[31:16] (signed)    data wavelet on ``cmd``
    WordPayload      value[31:0] (signed)                          psum, READ reply, raw total
    ControlPayload   arg[27:0]  op[31:28]                          control wavelet (ctrl=1)
    ConfigPayload    see :mod:`rtl.wavelet`                        configuration color

and of a control wavelet's ``arg``, by opcode::

    AddrArg          addr[15:0]  pairs[16]                         ADDR
    ReadArg          addr[15:0]  len[27:16]                        READ
    CrArg            o[24:0]  quiet_n[25]  quiet_s[26]  skip[27]   CR, CR_OUT, CR_ACT, CR_DELTA
    SelectArg        col[27:0]                                     SELECT
    MaskArg          bits[15:0]  chunk[21:16]  col[27:22]             MASK
    TokensArg        count[12:0]                                   TOKENS

Inside a tile: :func:`cr_job_layout` (a carriage return queued for the partial-sum engine, its
``o`` split into result slot and owner row; :class:`CrEntry`, with ``o`` whole, was that queue's
entry before the core was split and no hardware uses it now), the straps of a strapped tile
(:class:`RouteStrap` per color in :func:`route_straps_layout`, the configuration route,
:func:`core_strap_layout`).

The wavelet itself (:class:`~rtl.wavelet.Wavelet`), the control and configuration payloads and
their opcodes live in :mod:`rtl.wavelet` and are re-exported here.
"""

import dataclasses
from functools import cache

from amaranth.hdl import signed, unsigned
from amaranth.lib import data

from .core_params import CoreColors, CoreParams
from .validate import integer
from .wavelet import (
    COLOR_BITS,
    CONFIG,
    CONTROL,
    N_PORTS,
    WAVELET,
    Codec,
    ConfigOp,
    ConfigPayload,
    ControlOp,
    ControlPayload,
    Direction,
    Wavelet,
)

__all__ = [
    # re-exported from rtl.wavelet
    "Wavelet", "ControlPayload", "ConfigPayload", "ControlOp", "ConfigOp", "Codec",
    "WAVELET", "CONTROL", "CONFIG",
    # payloads and arguments
    "ARG_BITS", "MAX_ARG", "MAX_READ", "CR_O_BITS", "MAX_O",
    "WeightPayload", "LoadPayload", "WordPayload", "AddrArg", "ReadArg", "CrArg", "CrEntry",
    "SelectArg", "MaskArg", "TokensArg", "ONES_SLOT", "MASK_CHUNK", "MASK_MAX_CHUNKS",
    "MASK_MAX_COLS",
    "WEIGHT", "LOAD", "WORD", "ADDR_ARG", "READ_ARG", "CR_ARG", "CR_ENTRY",
    "SELECT_ARG", "MASK_ARG", "TOKENS_ARG", "control_data", "weight_data", "load_data",
    "word_data", "addr_data",
    "read_data", "cr_data", "select_data", "mask_data", "tokens_data",
    # straps
    "RouteStrap", "ROUTE_STRAP", "route_straps_layout", "route_straps_value",
    "core_strap_layout", "core_strap_codec", "core_strap_value",
    # inside the core
    "cr_job_layout", "engine_job_layout",
]


class WeightPayload(data.Struct):
    """A data wavelet on ``weight``: AXPY ``ACC[t] += value * X[slot][t]``."""
    value: signed(16)
    slot:  unsigned(16)


#: The slot an AXPY names to multiply the format's one (1.0) in every token instead of a row of
#: ``X``: a bias is a weight on it (``docs/pe.md``, AXPY). Every token is then nonzero (only the
#: gate leaves some out).
ONES_SLOT = 0xFFFF


class LoadPayload(data.Struct):
    """A data wavelet on ``cmd``: LOAD ``value`` at the load pointer (after an ADDR with
    ``pairs``, ``high`` at the word after it too)."""
    value: signed(16)
    high:  signed(16)


class WordPayload(data.Struct):
    """A 32-bit number: a partial sum, a READ reply, a raw total (``CR_OUT``)."""
    value: signed(32)


ARG_BITS = data.Layout.cast(ControlPayload)["arg"].width
#: The largest control argument (a carriage return's ``o``).
MAX_ARG = (1 << ARG_BITS) - 1


class AddrArg(data.Struct):
    """``arg`` of ADDR: the new load pointer, and whether each LOAD that follows writes two
    words (``pairs``: its ``value``, then its ``high``)."""
    addr:  unsigned(16)
    pairs: unsigned(1)
    _pad:  unsigned(ARG_BITS - 17)


class ReadArg(data.Struct):
    """``arg`` of READ: send ``len`` words of the core's memory from ``addr``."""
    addr: unsigned(16)
    len:  unsigned(ARG_BITS - 16)


#: Bits of a carriage return's output feature ``o`` (:class:`CrArg`), and the largest ``o``.
CR_O_BITS = 25
MAX_O = (1 << CR_O_BITS) - 1


class CrArg(data.Struct):
    """``arg`` of CR / CR_OUT / CR_ACT / CR_DELTA: the output feature ``o`` that is complete
    (``slot * rows + owner row``), and what this row may leave out of it (``docs/pe.md``):
    ``quiet_n`` / ``quiet_s``, its engine takes no psum from the north / south neighbour for
    this output (none will come); ``skip``, the row has nothing to do for it: no buffer is
    handed to the engine (nothing sent, no ``Y`` written), only the gate is reset."""
    o:       unsigned(CR_O_BITS)
    quiet_n: unsigned(1)
    quiet_s: unsigned(1)
    skip:    unsigned(1)


class SelectArg(data.Struct):
    """``arg`` of SELECT: the column whose core takes the ``cmd`` wavelets that follow (a core
    of another column discards them; a column no core has selects none)."""
    col: unsigned(ARG_BITS)


class MaskArg(data.Struct):
    """``arg`` of MASK: in the core of column ``col`` only, the gate bits of local tokens
    ``16 * chunk + j`` (``j`` = 0..15) := ``bits[j]``; an AXPY multiplies only the tokens whose
    gate is 1, until the next carriage return sets every gate bit again (``docs/pe.md``)."""
    bits:  unsigned(16)
    chunk: unsigned(6)
    col:   unsigned(ARG_BITS - 22)


class TokensArg(data.Struct):
    """``arg`` of TOKENS: the core's active tokens, ``0 .. n_tok``. The gate a carriage return
    leaves (and TOKENS itself sets) has the tokens below ``count`` on and the rest off, so the
    AXPYs and the partial-sum engine visit only those (``docs/pe.md``)."""
    count: unsigned(13)
    _pad:  unsigned(ARG_BITS - 13)


class CrEntry(data.Struct):
    """A carriage return queued in the core for its partial-sum engine (``raw``: a CR_OUT)."""
    o:   unsigned(ARG_BITS)
    raw: unsigned(1)


class RouteStrap(data.Struct):
    """One color's route as a strapped router takes it at reset (position 0), or the
    configuration route: ``rx`` and ``tx`` port masks (:class:`~rtl.wavelet.Direction` bits)."""
    rx: unsigned(N_PORTS)
    tx: unsigned(N_PORTS)


WEIGHT = Codec(WeightPayload)
LOAD = Codec(LoadPayload)
WORD = Codec(WordPayload)
ADDR_ARG = Codec(AddrArg)
READ_ARG = Codec(ReadArg)
CR_ARG = Codec(CrArg)
CR_ENTRY = Codec(CrEntry)
SELECT_ARG = Codec(SelectArg)
MASK_ARG = Codec(MaskArg)
TOKENS_ARG = Codec(TokensArg)
ROUTE_STRAP = Codec(RouteStrap)

#: Words one READ fetches at most (its ``len`` field).
MAX_READ = (1 << READ_ARG.fields["len"][1]) - 1
#: Tokens one MASK wavelet gates (its ``bits``), chunks a core's tokens may span (``chunk``),
#: and the columns a MASK can name (``col``).
MASK_CHUNK = MASK_ARG.fields["bits"][1]
MASK_MAX_CHUNKS = 1 << MASK_ARG.fields["chunk"][1]
MASK_MAX_COLS = 1 << MASK_ARG.fields["col"][1]


# Data words of the core's instructions (vectorised: scalars or arrays, like Codec.pack) --------

def control_data(op, arg=0):
    """The data of a control wavelet: opcode ``op`` with argument ``arg`` (a packed ``*Arg``)."""
    return CONTROL.pack(op=op, arg=arg)


def weight_data(value, slot):
    """AXPY: ``value`` (a signed 16-bit operand) times ``X[slot]``."""
    return WEIGHT.pack(value=value, slot=slot)


def load_data(value, high=0):
    """LOAD: ``value`` (a signed 16-bit operand), and ``high``, the word after it when the
    load pointer was set with ``pairs``."""
    return LOAD.pack(value=value, high=high)


def word_data(value):
    """A signed 32-bit number (a partial sum)."""
    return WORD.pack(value=value)


def addr_data(address, pairs=False):
    """ADDR: load pointer := ``address``; with ``pairs``, each LOAD after it writes two
    words."""
    return control_data(ControlOp.ADDR, ADDR_ARG.pack(addr=address, pairs=pairs))


def read_data(address, length):
    """READ: ``length`` words from ``address``."""
    return control_data(ControlOp.READ, READ_ARG.pack(addr=address, len=length))


def cr_data(o, raw=False, *, act=False, delta=False, quiet_n=False, quiet_s=False, skip=False):
    """CR (CR_OUT with ``raw``, CR_ACT with ``act``, CR_DELTA with ``delta``): output feature
    ``o`` is complete; ``quiet_n``, ``quiet_s``, ``skip``: the flags of :class:`CrArg`
    (vectorised like ``o``; ``raw``, ``act`` and ``delta`` are one flag for all)."""
    if raw + act + delta > 1:
        raise ValueError("a carriage return is at most one of raw (CR_OUT), act (CR_ACT) and "
                         "delta (CR_DELTA)")
    op = (ControlOp.CR_OUT if raw else ControlOp.CR_ACT if act else
          ControlOp.CR_DELTA if delta else ControlOp.CR)
    return control_data(op, CR_ARG.pack(o=o, quiet_n=quiet_n, quiet_s=quiet_s, skip=skip))


def select_data(col):
    """SELECT: the core of column ``col`` takes the ``cmd`` wavelets that follow."""
    return control_data(ControlOp.SELECT, SELECT_ARG.pack(col=col))


def mask_data(col, chunk, bits):
    """MASK: in column ``col``'s core, the gate of local tokens ``16 * chunk + j`` := bit ``j``
    of ``bits``."""
    return control_data(ControlOp.MASK, MASK_ARG.pack(col=col, chunk=chunk, bits=bits))


def tokens_data(count):
    """TOKENS: the core's active tokens := ``count`` (its gate: the tokens below it on)."""
    return control_data(ControlOp.TOKENS, TOKENS_ARG.pack(count=count))


# Straps ------------------------------------------------------------------------------------------

def route_straps_layout(n_colors):
    """The initial routes of a strapped router: a :class:`RouteStrap` per routable color."""
    return data.ArrayLayout(RouteStrap, n_colors)


def route_straps_value(n_colors, routes):
    """The constant (an ``int``, wider than 64 bits with more than 6 colors) for
    :func:`route_straps_layout` ``(n_colors)``: ``routes`` maps a color to its ``(rx, tx)``
    (masks, or anything :meth:`Direction.mask <rtl.wavelet.Direction.mask>` takes); other colors
    get no route. Encoded by Amaranth's own ``layout.const``, as the hardware reads it."""
    init = [{"rx": 0, "tx": 0} for _ in range(n_colors)]
    for color, (rx, tx) in routes.items():
        color = integer("Route color", color, 0, n_colors - 1)
        init[color] = {"rx": Direction.mask(rx), "tx": Direction.mask(tx)}
    return route_straps_layout(n_colors).const(init).as_value().value


@cache
def core_strap_layout(rows, cols=1):
    """The straps of a core built with ``straps=True``: its seven colors, its row and its
    column, inputs instead of elaboration constants, so every core of a mesh is the same
    module."""
    fields = {f.name: unsigned(COLOR_BITS) for f in dataclasses.fields(CoreColors)}
    fields["row"] = unsigned(max(1, (rows - 1).bit_length()))
    fields["col"] = unsigned(max(1, (cols - 1).bit_length()))
    return data.StructLayout(fields)


@cache
def core_strap_codec(rows, cols=1):
    """The :class:`Codec` of :func:`core_strap_layout` ``(rows, cols)``."""
    return Codec(core_strap_layout(rows, cols), name="CoreStrap")


def core_strap_value(params):
    """The constant a mesh ties a strapped core's straps to, from ``params``."""
    if not isinstance(params, CoreParams):
        raise TypeError(f"params must be a CoreParams, not {params!r}")
    return int(core_strap_codec(params.rows, params.cols).pack(
        **dataclasses.asdict(params.colors), row=params.row, col=params.col))


# Inside the core ---------------------------------------------------------------------------------

@cache
def engine_job_layout(rows, n_out, n_feat, n_tok):
    """A retired accumulator buffer's job for the partial-sum engine: its carriage return
    (:func:`cr_job_layout`) and the gate it was filled under, a bit per local token: the tokens
    the engine visits."""
    return data.StructLayout({"cr": cr_job_layout(rows, n_out, n_feat), "gate": unsigned(n_tok)})


def cr_job_layout(rows, n_out, n_feat):
    """A carriage return queued for the partial-sum engine: output feature ``o`` split into
    ``slot`` (``o // rows``, kept to the bits of ``range(max(n_out, n_feat))``: the engine
    writes ``Y`` or, for a CR_ACT, ``X`` only when the slot is in it) and ``owner``
    (``o % rows``), ``raw`` (a CR_OUT), ``act`` (a CR_ACT or CR_DELTA of the owner row: the
    result goes into ``X`` and out; on another row either is a CR), ``delta`` (with ``act``: a
    CR_DELTA, its engine visiting every active token and keeping the result where the gate is
    set, not its ReLU), and
    its ``quiet_n`` / ``quiet_s`` flags (:class:`CrArg`: no psum from that side)."""
    return data.StructLayout({"slot": unsigned(max(1, (max(n_out, n_feat) - 1).bit_length())),
                              "owner": unsigned(max(1, (rows - 1).bit_length())),
                              "raw": unsigned(1), "act": unsigned(1), "delta": unsigned(1),
                              "quiet_n": unsigned(1), "quiet_s": unsigned(1)})
