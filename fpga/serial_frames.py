"""The serial frames between a host and the mesh bridge (``fpga/bridge.py``), one definition.

Every frame is a sync byte, a command byte, a fixed-length payload and a CRC-8 over the command
and payload bytes (:data:`CRC`, CRC-8/SMBUS of ``amaranth.lib.crc``'s catalogue: polynomial
``x^8 + x^2 + x + 1``, ``0x07``, initial value 0, no reflection, no final XOR; the bridge's
logic is the same entry's hardware processor). Multi-byte fields are little-endian. The
contract, with the reasons, is ``docs/bridge.md``; the bridge's RTL takes its constants from
here, the host (:mod:`runtime.board`) and the testbenches encode and decode with these
functions.

Host to bridge, 8 bytes each: ``0x00 + r`` a wavelet into row ``r`` (payload: the 38-bit packed
wavelet, bits 39:38 zero); ``0x80`` a status request (payload zero).

Bridge to host: ``0x00 + c`` a wavelet that left outlet ``c`` (8 bytes, payload as above);
``0x40 + r`` a credit for row ``r`` (8 bytes: the count in the first payload byte, then zeros);
``0x80`` the status (10 bytes: cycles (4), flags (1), bad frames (2)).
"""

import enum
from dataclasses import dataclass

from amaranth.lib.crc import catalog

from wse.rtl.validate import integer

__all__ = [
    "SYNC", "CRC", "MAX_PORTS", "PAYLOAD_BYTES", "HOST_FRAME_BYTES", "DEFAULT_FIFO_DEPTH",
    "Op", "Flag", "FrameError", "Status", "crc8",
    "raw_frame", "wavelet_frame", "status_request", "decode_host_frame",
    "outlet_frame", "credit_frame", "status_frame", "reply_length", "ReplyDecoder",
]

SYNC = 0xA5
#: The frames' checksum, over bytes: ``CRC.compute(data)`` here, ``CRC.create()`` in the bridge.
CRC = catalog.CRC8_SMBUS(data_width=8)
#: Rows (intakes) and columns (outlets) a command byte can address.
MAX_PORTS = 64
#: Payload bytes of every host frame, and of outlet and credit replies.
PAYLOAD_BYTES = 5
HOST_FRAME_BYTES = 1 + 1 + PAYLOAD_BYTES + 1
STATUS_PAYLOAD_BYTES = 7
#: Wavelets each row's intake FIFO in the bridge holds (the host's initial credit per row).
DEFAULT_FIFO_DEPTH = 16
_WAVELET_BITS = 38


class Op(enum.IntEnum):
    """The command byte's top two bits; the low six are a row or column (0 for ``STATUS``)."""
    WAVELET = 0x00     # host: into row; bridge: from outlet column
    CREDIT = 0x40      # bridge only
    STATUS = 0x80      # host: request; bridge: reply


class Flag(enum.IntFlag):
    """Bits of the status frame's flags byte (all sticky since reset)."""
    ERROR = 0x01       # the mesh's error output: a router dropped a wavelet, a core counted one
    OVERFLOW = 0x02    # the mesh's overflow output: a core saturated
    BAD_FRAME = 0x04   # at least one bad frame since reset
    DROPPED = 0x08     # a good wavelet frame found its row's FIFO full (counted as bad)


class FrameError(ValueError):
    """A frame failed its checks (sync, length, checksum, command, reserved bits)."""


@dataclass(frozen=True)
class Status:
    """A decoded status reply: ``cycles`` of the exchange (from the first wavelet that entered
    the mesh after the previous status to the last cycle the bridge was busy), the flags and
    the number of bad frames since reset (saturates at 0xFFFF)."""
    cycles: int
    flags: Flag
    bad_frames: int

    @property
    def error(self):
        return bool(self.flags & Flag.ERROR)

    @property
    def overflow(self):
        return bool(self.flags & Flag.OVERFLOW)


def crc8(data):
    """The frames' CRC-8 (:data:`CRC`) of ``data`` (bytes)."""
    return CRC.compute(data)


def raw_frame(command, payload):
    """A frame of any ``command`` byte and ``payload`` bytes, unchecked: the typed builders below
    check their arguments; this one also makes the frames a host never sends (for tests)."""
    body = bytes([command]) + bytes(payload)
    return bytes([SYNC]) + body + bytes([crc8(body)])


def _word(word):
    word = int(word)
    if not 0 <= word < 1 << _WAVELET_BITS:
        raise ValueError(f"wavelet must be a {_WAVELET_BITS}-bit packed word, not {word!r}")
    return word.to_bytes(PAYLOAD_BYTES, "little")


def wavelet_frame(row, word):
    """The host frame that puts packed wavelet ``word`` into the intake of ``row``."""
    return raw_frame(Op.WAVELET | integer("row", row, 0, MAX_PORTS - 1), _word(word))


def status_request():
    """The host frame that asks for a status reply once every wavelet sent has been taken,
    the mesh is idle and every outlet wavelet has been sent back."""
    return raw_frame(Op.STATUS, bytes(PAYLOAD_BYTES))


def decode_host_frame(frame, rows):
    """The bridge's checks, as a model: ``("wavelet", row, word)`` or ``("status",)`` for a
    good 8-byte host frame of a ``rows``-row mesh; :class:`FrameError` naming the fault."""
    frame = bytes(frame)
    if len(frame) != HOST_FRAME_BYTES:
        raise FrameError(f"a host frame has {HOST_FRAME_BYTES} bytes, not {len(frame)}")
    if frame[0] != SYNC:
        raise FrameError(f"sync byte must be {SYNC:#04x}, not {frame[0]:#04x}")
    if crc8(frame[1:]) != 0:
        raise FrameError(f"checksum {frame[-1]:#04x} does not match {crc8(frame[1:-1]):#04x}")
    command, payload = frame[1], int.from_bytes(frame[2:-1], "little")
    if command & 0xC0 == Op.WAVELET:
        row = command & 0x3F
        if row >= rows:
            raise FrameError(f"row {row} is outside the {rows}-row mesh")
        if payload >> _WAVELET_BITS:
            raise FrameError("reserved payload bits 39:38 must be zero")
        return ("wavelet", row, payload)
    if command == Op.STATUS:
        if payload:
            raise FrameError("a status request's payload must be zero")
        return ("status",)
    raise FrameError(f"unknown command {command:#04x}")


def outlet_frame(col, word):
    """The bridge's frame for packed wavelet ``word`` leaving outlet ``col``."""
    return raw_frame(Op.WAVELET | integer("col", col, 0, MAX_PORTS - 1), _word(word))


def credit_frame(row, count):
    """The bridge's frame returning ``count`` wavelets of credit for ``row``."""
    return raw_frame(Op.CREDIT | integer("row", row, 0, MAX_PORTS - 1),
                  bytes([integer("count", count, 0, 255)]) + bytes(PAYLOAD_BYTES - 1))


def status_frame(cycles, flags, bad_frames):
    """The bridge's status reply."""
    return raw_frame(Op.STATUS, integer("cycles", cycles, 0, (1 << 32) - 1).to_bytes(4, "little")
                  + bytes([integer("flags", flags, 0, 255)])
                  + integer("bad_frames", bad_frames, 0, 0xFFFF).to_bytes(2, "little"))


def reply_length(command):
    """Bytes of a bridge frame with ``command``; :class:`FrameError` for an unknown one."""
    if command & 0xC0 in (Op.WAVELET, Op.CREDIT):
        return 2 + PAYLOAD_BYTES + 1
    if command == Op.STATUS:
        return 2 + STATUS_PAYLOAD_BYTES + 1
    raise FrameError(f"unknown reply command {command:#04x}")


class ReplyDecoder:
    """Turns the bridge's byte stream into ``("outlet", col, word)``, ``("credit", row, count)``
    and ``("status", Status)`` tuples. :meth:`feed` returns the complete frames so far; a byte
    where a sync byte must be, an unknown command or a failed checksum raises
    :class:`FrameError` (the stream is then out of step: the caller gives up)."""

    def __init__(self):
        self._buffer = bytearray()

    @property
    def pending(self):
        """Bytes of an incomplete frame held."""
        return len(self._buffer)

    def feed(self, data):
        self._buffer += data
        frames = []
        while self._buffer:
            if self._buffer[0] != SYNC:
                raise FrameError(f"expected the sync byte {SYNC:#04x}, got "
                                 f"{self._buffer[0]:#04x}")
            if len(self._buffer) < 2:
                break
            length = reply_length(self._buffer[1])
            if len(self._buffer) < length:
                break
            frame, self._buffer = bytes(self._buffer[:length]), self._buffer[length:]
            frames.append(self._decode(frame))
        return frames

    @staticmethod
    def _decode(frame):
        if crc8(frame[1:]) != 0:
            raise FrameError(f"reply {frame.hex(' ')} fails its checksum")
        command, payload = frame[1], frame[2:-1]
        if command == Op.STATUS:
            return ("status", Status(cycles=int.from_bytes(payload[0:4], "little"),
                                     flags=Flag(payload[4] & 0x0F),
                                     bad_frames=int.from_bytes(payload[5:7], "little")))
        value = int.from_bytes(payload, "little")
        if command & 0xC0 == Op.CREDIT:
            return ("credit", command & 0x3F, value)
        if value >> _WAVELET_BITS:
            raise FrameError(f"reply {frame.hex(' ')} sets reserved bits 39:38")
        return ("outlet", command & 0x3F, value)
