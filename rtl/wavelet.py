"""The 38-bit fabric wavelet, its control and configuration payloads, and the port directions.

Everything that crosses the fabric is a :class:`Wavelet`: 32 data bits, a 5-bit color and a
control bit. This module is the one definition of that layout, in hardware (Amaranth
:class:`~amaranth.lib.data.Struct`) and in software (a vectorised numpy codec derived from the
same layouts), so nothing else in the project packs bits by hand.

Bit layout (LSB first)::

    Wavelet          data[31:0]  color[36:32]  ctrl[37]
    ControlPayload   arg[27:0]   op[31:28]                     (data of a ctrl=1 wavelet)
    ConfigPayload    tx[4:0] rx[9:5] position[11:10] last[13:12] cmd[17:14]
                     target[22:18] op[24:23] hops[31:26]       (data of a config-color wavelet)
"""

import enum

import numpy as np
from amaranth.hdl import Shape, unsigned
from amaranth.lib import data
from amaranth.lib import enum as hw_enum

__all__ = [
    "DATA_BITS", "COLOR_BITS", "WAVELET_BITS", "MAX_COLORS", "N_PORTS", "PORT_MASK",
    "Direction", "ControlOp", "ConfigOp",
    "Wavelet", "ControlPayload", "ConfigPayload",
    "Codec", "WAVELET", "CONTROL", "CONFIG",
    "pack", "unpack",
]


DATA_BITS = 32
COLOR_BITS = 5
WAVELET_BITS = DATA_BITS + COLOR_BITS + 1
MAX_COLORS = 1 << COLOR_BITS


class Direction(enum.IntEnum):
    """A router port: the four mesh neighbours and the ramp to the core.

    The value is the port's bit in a route mask (``rx`` / ``tx``).
    """
    N = 0
    E = 1
    S = 2
    W = 3
    R = 4

    @property
    def bit(self):
        return 1 << self.value

    @property
    def opposite(self):
        """The port of the neighbour that this port is wired to (the ramp faces itself)."""
        return {Direction.N: Direction.S, Direction.S: Direction.N,
                Direction.E: Direction.W, Direction.W: Direction.E,
                Direction.R: Direction.R}[self]

    @classmethod
    def mask(cls, ports):
        """A route mask from a direction, an iterable of directions or their names (``"NE"``),
        or a mask (an ``int``)."""
        if isinstance(ports, Direction):
            return ports.bit
        if isinstance(ports, int):
            if not 0 <= ports < 1 << len(cls):
                raise ValueError(f"Route mask must be a 5-bit integer, not {ports!r}")
            return ports
        result = 0
        for port in ports:
            if isinstance(port, str) and port in cls.__members__:
                result |= cls[port].bit
            elif isinstance(port, (int, Direction)) and not isinstance(port, bool) \
                    and 0 <= port < len(cls):
                result |= cls(port).bit
            else:
                raise ValueError(f"Port must be one of N, E, S, W, R, not {port!r}")
        return result

    @classmethod
    def from_mask(cls, mask):
        """The directions whose bits are set in ``mask``, in port order."""
        return [d for d in cls if mask & d.bit]


#: A router's ports (:class:`Direction`): the width of a route mask.
N_PORTS = len(Direction)
#: A route mask with every port in it.
PORT_MASK = (1 << N_PORTS) - 1


class ControlOp(hw_enum.Enum, shape=4):
    """Opcode of a control wavelet (``ctrl=1``), in its data bits [31:28].

    The router acts on the switch commands (``ADVANCE``, ``RESET``, ``TEARDOWN``): each router
    the wavelet passes forwards it along the color's current route, then applies the command to
    that color. Other opcodes travel through the router untouched and belong to the core.
    """
    NOP      = 0
    ADVANCE  = 1   # switch to the color's next route position (wraps after the last one)
    RESET    = 2   # switch back to position 0
    TEARDOWN = 3   # block the color until a configuration wavelet resets it
    CR       = 4   # carriage return: output feature ``arg`` is complete (core)
    ADDR     = 5   # the core's load pointer := ``arg[15:0]``, LOAD pairs := ``arg[16]`` (core)
    READ     = 6   # send ``arg[27:16]`` words of the core's memory from ``arg[15:0]`` (core)
    CR_OUT   = 7   # carriage return whose total leaves raw on ``out`` instead of ``Y`` (core)
    SELECT   = 8   # on ``cmd``: the core of column ``arg`` takes the commands that follow (core)
    MASK     = 9   # the core of column ``arg.col`` gates 16 of its tokens until the next CR (core)
    TOKENS   = 10  # the core's active tokens := ``arg``: its engine reduces only those (core)
    CR_ACT   = 11  # carriage return whose owner writes ``relu`` of the result into ``X`` (core)
    CR_DELTA = 12  # carriage return whose owner writes the result into ``X`` where its gate is set


class ConfigOp(hw_enum.Enum, shape=2):
    """Operation of a configuration wavelet (on the router's reserved configuration color)."""
    WRITE_ROUTE = 0   # position ``position`` of color ``target`` := (rx, tx); last := ``last``
    SWITCH      = 1   # apply switch command ``cmd`` to color ``target`` (RESET also ends TEARDOWN)


class Wavelet(data.Struct):
    """One fabric message: 32-bit ``data``, 5-bit ``color``, ``ctrl`` flag (38 bits)."""
    data:  unsigned(DATA_BITS)
    color: unsigned(COLOR_BITS)
    ctrl:  unsigned(1)


class ControlPayload(data.Struct):
    """The data of a control wavelet: an opcode and a 28-bit argument."""
    arg: unsigned(28)
    op:  ControlOp


class ConfigPayload(data.Struct):
    """The data of a configuration wavelet.

    ``hops`` counts the routers still to pass: a router that receives it with ``hops == 0``
    applies it; otherwise it forwards it along the configuration color's route with ``hops - 1``.
    """
    tx:       unsigned(5)
    rx:       unsigned(5)
    position: unsigned(2)
    last:     unsigned(2)
    cmd:      ControlOp
    target:   unsigned(COLOR_BITS)
    op:       ConfigOp
    _pad:     unsigned(1)
    hops:     unsigned(6)


class Codec:
    """Vectorised numpy packing of a :class:`~amaranth.lib.data.Struct` layout.

    The field offsets, widths and signedness come from the Amaranth layout itself, so hardware
    and software cannot disagree. Words are ``uint64``; enum fields take and give their integer
    values; a signed field takes and gives two's-complement integers. Fields whose name starts
    with ``_`` are padding: always zero.

    ``pack(**fields)`` broadcasts its arguments (scalars or arrays) and raises ``ValueError``
    naming the field when a value does not fit; a field left out packs as zero.
    ``unpack(words)`` returns a dict of ``int64`` arrays.

    Parameters
    ----------
    struct : data.Struct subclass or data.StructLayout
        The layout (at most 64 bits).
    name : str
        For messages; the class name of ``struct`` by default.
    """

    def __init__(self, struct, name=None):
        layout = data.Layout.cast(struct)
        self.name = name if name is not None else struct.__name__
        self.width = layout.size
        if self.width > 64:
            raise ValueError(f"{self.name} must be at most 64 bits wide to pack into uint64, "
                             f"not {self.width}")
        self.fields = {name: (field.offset, field.width) for name, field in layout
                       if not name.startswith("_")}
        self.signed = {name: Shape.cast(field.shape).signed for name, field in layout
                       if not name.startswith("_")}

    def pack(self, **fields):
        unknown = set(fields) - set(self.fields)
        if unknown:
            raise ValueError(f"{self.name} has no field {sorted(unknown)[0]!r}; "
                             f"fields are {', '.join(self.fields)}")
        word = np.zeros(np.broadcast(*[np.asarray(v) for v in fields.values()]).shape
                        if fields else (), dtype=np.uint64)
        for name, value in fields.items():
            offset, width = self.fields[name]
            lo, hi = ((-(1 << (width - 1)), (1 << (width - 1)) - 1) if self.signed[name]
                      else (0, (1 << width) - 1))
            what = f"{width}-bit signed" if self.signed[name] else f"{width} bits"
            value = np.asarray(_enum_value(value))
            if value.dtype == object and all(isinstance(v, int) for v in value.flat):
                bad = next(v for v in value.flat if not lo <= v <= hi)
                raise ValueError(f"{self.name}.{name} must fit in {what}, not {bad!r}")
            if value.dtype.kind not in "iub":
                raise ValueError(f"{self.name}.{name} must be integers, not {value.dtype} "
                                 f"values")
            if value.dtype.kind == "u" and value.size and int(value.max()) > hi:
                raise ValueError(f"{self.name}.{name} must fit in {what}, "
                                 f"not {int(value.max())!r}")
            value = value.astype(np.int64) if value.dtype.kind != "u" else \
                value.astype(np.uint64).astype(np.int64)
            outside = (value < lo) | (value > hi)
            if np.any(outside):
                raise ValueError(f"{self.name}.{name} must fit in {what}, "
                                 f"not {int(value[outside].flat[0])!r}")
            if self.signed[name]:
                value = value & ((1 << width) - 1)       # two's complement
            word |= value.astype(np.uint64) << np.uint64(offset)
        return word[()] if word.ndim == 0 else word

    def unpack(self, words):
        words = np.asarray(words, dtype=np.uint64)
        fields = {}
        for name, (offset, width) in self.fields.items():
            value = ((words >> np.uint64(offset)) & np.uint64((1 << width) - 1)).astype(np.int64)
            if self.signed[name]:
                value = np.where(value >> (width - 1) != 0, value - (1 << width), value)
            fields[name] = value
        return fields


def _enum_value(value):
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (list, tuple)):
        return [_enum_value(v) for v in value]
    return value


WAVELET = Codec(Wavelet)
CONTROL = Codec(ControlPayload)
CONFIG = Codec(ConfigPayload)


def pack(data, color, ctrl=0):
    """Pack wavelets (scalars or arrays) into 38-bit ``uint64`` words."""
    return WAVELET.pack(data=data, color=color, ctrl=ctrl)


def unpack(words):
    """Unpack 38-bit words into ``(data, color, ctrl)`` ``int64`` arrays."""
    fields = WAVELET.unpack(words)
    return fields["data"], fields["color"], fields["ctrl"]
