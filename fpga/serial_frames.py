"""The serial frames between a host and the mesh bridge (``fpga/bridge.py``), one definition.

Every frame is a sync byte, a command byte, a fixed-length payload and a CRC-8 over the command
and payload bytes (:data:`CRC`, CRC-8/SMBUS of ``amaranth.lib.crc``'s catalogue: polynomial
``x^8 + x^2 + x + 1``, ``0x07``, initial value 0, no reflection, no final XOR; the bridge's
logic is the same entry's hardware processor). Multi-byte fields are little-endian. The
contract, with the reasons, is ``docs/bridge.md``; the bridge's RTL takes its constants from
here, the host (:mod:`runtime.board`) and the testbenches encode and decode with these
functions.

The command byte and the payloads are ``amaranth.lib.data`` layouts, read through views in the
bridge and packed by a :class:`~rtl.wavelet.Codec` of the same layout here; nothing shifts or
masks their bits by hand. Bit layout (LSB first)::

    FrameCommand     index[5:0] (row or column)  op[7:6] (:class:`Op`)
    WaveletPayload   wavelet[37:0] (:class:`~rtl.wavelet.Wavelet`)  reserved[39:38] (zero)
    CreditPayload    count[7:0]  (bits 39:8 zero)
    StatusPayload    cycles[31:0]  flags[39:32] (:class:`StatusFlags`)  bad_frames[55:40]

Host to bridge, 8 bytes each: ``WAVELET`` with index ``r`` (byte ``0x00 + r``) a wavelet into
row ``r`` (``WaveletPayload``); ``STATUS`` with index 0 (``0x80``) a status request (payload
zero).

Bridge to host: ``WAVELET`` with index ``c`` (``0x00 + c``) a wavelet that left outlet ``c`` (8
bytes, ``WaveletPayload``); ``CREDIT`` with index ``r`` (``0x40 + r``) a credit for row ``r`` (8
bytes, ``CreditPayload``); ``STATUS`` with index 0 (``0x80``) the status (10 bytes,
``StatusPayload``).
"""

import enum
from dataclasses import dataclass

from amaranth.hdl import unsigned
from amaranth.lib import data
from amaranth.lib import enum as hw_enum
from amaranth.lib.crc import catalog

from wse.rtl.validate import integer
from wse.rtl.wavelet import WAVELET_BITS, Codec, Wavelet

__all__ = [
    "SYNC", "CRC", "MAX_PORTS", "PAYLOAD_BYTES", "HOST_FRAME_BYTES", "DEFAULT_FIFO_DEPTH",
    "Op", "FrameCommand", "WaveletPayload", "CreditPayload", "StatusFlags", "StatusPayload",
    "FRAME_COMMAND", "WAVELET_PAYLOAD", "CREDIT_PAYLOAD", "STATUS_FLAGS", "STATUS_PAYLOAD",
    "Flag", "FrameError", "Status", "crc8", "command_byte", "split_command",
    "raw_frame", "wavelet_frame", "status_request", "decode_host_frame",
    "outlet_frame", "credit_frame", "status_frame", "reply_length", "ReplyDecoder",
]

SYNC = 0xA5
#: The frames' checksum, over bytes: ``CRC.compute(data)`` here, ``CRC.create()`` in the bridge.
CRC = catalog.CRC8_SMBUS(data_width=8)


class Op(hw_enum.Enum, shape=2):
    """What a frame is: the command byte's top two bits (:class:`FrameCommand`)."""
    WAVELET = 0        # host: into row; bridge: from outlet column
    CREDIT = 1         # bridge only
    STATUS = 2         # host: request; bridge: reply (index 0)


class FrameCommand(data.Struct):
    """A frame's command byte: the row or column ``index`` (0 for ``STATUS``) and the ``op``."""
    index: unsigned(6)
    op:    Op


class WaveletPayload(data.Struct):
    """The payload of a host wavelet frame and of an outlet reply: the packed wavelet and two
    reserved bits that must be zero."""
    wavelet:  Wavelet
    reserved: unsigned(2)


class CreditPayload(data.Struct):
    """The payload of a credit reply: the wavelets of credit returned."""
    count: unsigned(8)
    _pad:  unsigned(32)


class StatusFlags(data.Struct):
    """The status reply's flags byte, bit for bit the members of :class:`Flag`."""
    error:     unsigned(1)
    overflow:  unsigned(1)
    bad_frame: unsigned(1)
    dropped:   unsigned(1)
    _pad:      unsigned(4)


class StatusPayload(data.Struct):
    """The payload of the status reply (:class:`Status`)."""
    cycles:     unsigned(32)
    flags:      StatusFlags
    bad_frames: unsigned(16)


FRAME_COMMAND = Codec(FrameCommand)
WAVELET_PAYLOAD = Codec(WaveletPayload)
CREDIT_PAYLOAD = Codec(CreditPayload)
STATUS_FLAGS = Codec(StatusFlags)
STATUS_PAYLOAD = Codec(StatusPayload)

#: Rows (intakes) and columns (outlets) a command byte can address.
MAX_PORTS = 1 << FRAME_COMMAND.fields["index"][1]
#: Payload bytes of every host frame, and of outlet and credit replies.
PAYLOAD_BYTES = WAVELET_PAYLOAD.width // 8
HOST_FRAME_BYTES = 1 + 1 + PAYLOAD_BYTES + 1
STATUS_PAYLOAD_BYTES = STATUS_PAYLOAD.width // 8
#: Wavelets each row's intake FIFO in the bridge holds (the host's initial credit per row).
DEFAULT_FIFO_DEPTH = 16


class Flag(enum.IntFlag):
    """Bits of the status frame's flags byte (all sticky since reset); each is the field of
    :class:`StatusFlags` of the same name, lower case."""
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


def command_byte(op, index=0):
    """The command byte of a frame of ``op`` (an :class:`Op`) for row or column ``index``."""
    return int(FRAME_COMMAND.pack(op=Op(op), index=integer("index", index, 0, MAX_PORTS - 1)))


def split_command(command):
    """``(op, index)`` of a command byte; ``op`` is ``None`` for the unused fourth op."""
    fields = FRAME_COMMAND.unpack(command)
    op = int(fields["op"])
    return (Op(op) if op in Op._value2member_map_ else None), int(fields["index"])


def _payload(codec, **fields):
    return int(codec.pack(**fields)).to_bytes(codec.width // 8, "little")


def _word(word):
    word = integer("wavelet", word)
    if not 0 <= word < 1 << WAVELET_BITS:
        raise ValueError(f"wavelet must be a {WAVELET_BITS}-bit packed word, not {word!r}")
    return _payload(WAVELET_PAYLOAD, wavelet=word)


def wavelet_frame(row, word):
    """The host frame that puts packed wavelet ``word`` into the intake of ``row``."""
    return raw_frame(command_byte(Op.WAVELET, integer("row", row, 0, MAX_PORTS - 1)), _word(word))


def status_request():
    """The host frame that asks for a status reply once every wavelet sent has been taken,
    the mesh is idle and every outlet wavelet has been sent back."""
    return raw_frame(command_byte(Op.STATUS), bytes(PAYLOAD_BYTES))


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
    (op, index), payload = split_command(frame[1]), int.from_bytes(frame[2:-1], "little")
    if op is Op.WAVELET:
        if index >= rows:
            raise FrameError(f"row {index} is outside the {rows}-row mesh")
        fields = WAVELET_PAYLOAD.unpack(payload)
        if fields["reserved"]:
            raise FrameError("reserved payload bits 39:38 must be zero")
        return ("wavelet", index, int(fields["wavelet"]))
    if op is Op.STATUS and index == 0:
        if payload:
            raise FrameError("a status request's payload must be zero")
        return ("status",)
    raise FrameError(f"unknown command {frame[1]:#04x}")


def outlet_frame(col, word):
    """The bridge's frame for packed wavelet ``word`` leaving outlet ``col``."""
    return raw_frame(command_byte(Op.WAVELET, integer("col", col, 0, MAX_PORTS - 1)), _word(word))


def credit_frame(row, count):
    """The bridge's frame returning ``count`` wavelets of credit for ``row``."""
    return raw_frame(command_byte(Op.CREDIT, integer("row", row, 0, MAX_PORTS - 1)),
                     _payload(CREDIT_PAYLOAD, count=integer("count", count, 0, 255)))


def status_frame(cycles, flags, bad_frames):
    """The bridge's status reply."""
    return raw_frame(command_byte(Op.STATUS),
                     _payload(STATUS_PAYLOAD,
                              cycles=integer("cycles", cycles, 0, (1 << 32) - 1),
                              flags=integer("flags", flags, 0, 255),
                              bad_frames=integer("bad_frames", bad_frames, 0, 0xFFFF)))


def reply_length(command):
    """Bytes of a bridge frame with ``command``; :class:`FrameError` for an unknown one."""
    op, index = split_command(command)
    if op in (Op.WAVELET, Op.CREDIT):
        return 2 + PAYLOAD_BYTES + 1
    if op is Op.STATUS and index == 0:
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
        (op, index), payload = split_command(frame[1]), int.from_bytes(frame[2:-1], "little")
        if op is Op.STATUS:
            fields = STATUS_PAYLOAD.unpack(payload)
            set_flags = STATUS_FLAGS.unpack(fields["flags"])
            return ("status", Status(cycles=int(fields["cycles"]),
                                     flags=Flag(sum(Flag[name.upper()]
                                                    for name, bit in set_flags.items() if bit)),
                                     bad_frames=int(fields["bad_frames"])))
        if op is Op.CREDIT:
            return ("credit", index, int(CREDIT_PAYLOAD.unpack(payload)["count"]))
        fields = WAVELET_PAYLOAD.unpack(payload)
        if fields["reserved"]:
            raise FrameError(f"reply {frame.hex(' ')} sets reserved bits 39:38")
        return ("outlet", index, int(fields["wavelet"]))
