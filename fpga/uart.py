"""UART receiver and transmitter: 8 data bits, no parity, one stop bit (8N1), LSB first.

One bit lasts ``divisor`` clock cycles (``clk_hz // baud``). The receiver synchronises its input
through two flip-flops, finds the start bit's falling edge, samples every bit in its middle and
checks the stop bit; the transmitter sends one byte at a time from a stream.
"""

import operator

from amaranth.hdl import Module, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.cdc import FFSynchronizer
from amaranth.lib.wiring import In, Out

__all__ = ["MIN_DIVISOR", "RxByte", "UARTRx", "UARTTx", "check_divisor", "divisor_for"]

#: The smallest divisor: mid-bit sampling needs a few cycles a bit.
MIN_DIVISOR = 4
#: The largest baud error (clock rate over divisor, against the asked baud) 8N1 tolerates well.
MAX_BAUD_ERROR = 0.02


class RxByte(data.Struct):
    """A received byte; ``error`` is set when its stop bit was low (a framing error)."""
    data:  unsigned(8)
    error: unsigned(1)


def check_divisor(divisor):
    """``divisor`` as an ``int``; ``ValueError`` unless it is at least :data:`MIN_DIVISOR`."""
    try:
        value = operator.index(divisor)
    except TypeError:
        raise TypeError(f"divisor must be an integer, not {divisor!r}") from None
    if value < MIN_DIVISOR:
        raise ValueError(f"divisor must be at least {MIN_DIVISOR} clock cycles a bit, "
                         f"not {divisor!r}")
    return value


def divisor_for(clk_hz, baud):
    """``clk_hz // baud``, checked: both positive integers, the divisor at least
    :data:`MIN_DIVISOR`, the baud rate it gives within 2 % of ``baud``."""
    for name, value in (("clk_hz", clk_hz), ("baud", baud)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, not {value!r}")
    divisor = clk_hz // baud
    if divisor < MIN_DIVISOR:
        raise ValueError(f"clk_hz // baud must be at least {MIN_DIVISOR} clock cycles a bit, "
                         f"not {divisor} (clk_hz {clk_hz}, baud {baud})")
    error = abs(clk_hz / divisor - baud) / baud
    if error > MAX_BAUD_ERROR:
        raise ValueError(f"baud {baud} from clk_hz {clk_hz} (divisor {divisor}) is off by "
                         f"{error:.1%}, more than {MAX_BAUD_ERROR:.0%}")
    return divisor


class UARTRx(wiring.Component):
    """UART receiver, 8N1.

    Latency: a byte is offered one cycle after the middle of its stop bit, for one cycle (a
    UART cannot wait: the stream has no backpressure). A start bit that is no longer low in its
    middle is a glitch and ignored. A low stop bit sets ``error`` in the byte offered (a framing
    error; the data bits are what was sampled) and the receiver waits for the line to go high
    before it looks for the next start bit, so a break gives one byte, not many.

    Members
    -------
    rx : In(1)
        The serial line (idle high), asynchronous to the clock.
    o : Out(stream.Signature(RxByte, always_ready=True))
        The bytes received.
    """

    rx: In(1, init=1)
    o: Out(stream.Signature(RxByte, always_ready=True))

    def __init__(self, divisor):
        self.divisor = check_divisor(divisor)
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        line = Signal(init=1)
        m.submodules.sync = FFSynchronizer(self.rx, line, init=1)

        timer = Signal(range(self.divisor))
        bits = Signal(range(9))
        shift = Signal(8)
        m.d.sync += self.o.valid.eq(0)
        with m.FSM():
            with m.State("IDLE"):
                with m.If(~line):
                    m.d.sync += timer.eq(self.divisor // 2 - 1)
                    m.next = "START"
            with m.State("START"):
                with m.If(timer != 0):
                    m.d.sync += timer.eq(timer - 1)
                with m.Elif(line):
                    m.next = "IDLE"                       # a glitch, not a start bit
                with m.Else():
                    m.d.sync += [timer.eq(self.divisor - 1), bits.eq(0)]
                    m.next = "DATA"
            with m.State("DATA"):
                with m.If(timer != 0):
                    m.d.sync += timer.eq(timer - 1)
                with m.Else():
                    m.d.sync += [shift.eq((shift >> 1) | (line << 7)), bits.eq(bits + 1),
                                 timer.eq(self.divisor - 1)]
                    with m.If(bits == 7):
                        m.next = "STOP"
            with m.State("STOP"):
                with m.If(timer != 0):
                    m.d.sync += timer.eq(timer - 1)
                with m.Else():
                    m.d.sync += [self.o.valid.eq(1), self.o.payload.data.eq(shift),
                                 self.o.payload.error.eq(~line)]
                    m.next = "IDLE"
                    with m.If(~line):
                        m.next = "BREAK"
            with m.State("BREAK"):
                with m.If(line):
                    m.next = "IDLE"
        return m


class UARTTx(wiring.Component):
    """UART transmitter, 8N1.

    Takes a byte from ``i`` when idle (``ready`` high) and sends it: ``10 * divisor`` cycles a
    byte; ``ready`` is high in the cycle after the stop bit ends, so back-to-back bytes go
    out one cycle apart (``10 * divisor + 1`` cycles a byte).

    Members
    -------
    i : In(stream.Signature(8))
        Bytes to send.
    tx : Out(1)
        The serial line (idle high).
    """

    i: In(stream.Signature(8))
    tx: Out(1, init=1)

    def __init__(self, divisor):
        self.divisor = check_divisor(divisor)
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        timer = Signal(range(self.divisor))
        frame = Signal(10, init=0x3FF)     # stop, data[7:0], start: shifted out LSB first
        left = Signal(range(11))
        m.d.comb += [self.tx.eq(frame[0]), self.i.ready.eq(left == 0)]
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [frame.eq((1 << 9) | (self.i.payload << 1)), left.eq(10),
                         timer.eq(self.divisor - 1)]
        with m.Elif(left != 0):
            with m.If(timer != 0):
                m.d.sync += timer.eq(timer - 1)
            with m.Else():
                m.d.sync += [frame.eq((frame >> 1) | (1 << 9)), left.eq(left - 1),
                             timer.eq(self.divisor - 1)]
        return m
