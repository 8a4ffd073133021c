"""UART line models for cocotb: 8N1 bytes onto a DUT input and off a DUT output, ``divisor``
clock cycles a bit, timed by the DUT's clock. The Amaranth-simulator models are in
:mod:`tb.uart_sim`."""

from collections import deque

from cocotb.triggers import ClockCycles, FallingEdge

__all__ = ["UartSource", "UartSink", "UartFramingError"]


class UartFramingError(AssertionError):
    """A byte on the DUT's line broke 8N1 (start bit not low in its middle, stop bit low)."""


class UartSource:
    """Drives bytes onto ``line`` (idle high). :meth:`send` queues bytes; :meth:`run` sends
    everything queued and returns (a coroutine to await or ``start_soon``)."""

    def __init__(self, clk, line, divisor):
        self.clk, self.line, self.divisor = clk, line, divisor
        self.queue = deque()
        self.sent = 0
        self.busy = False
        line.value = 1

    def send(self, data):
        self.queue.extend(data)

    async def run(self):
        self.busy = True
        while self.queue:
            byte = self.queue.popleft()
            for bit in (0, *((byte >> k) & 1 for k in range(8)), 1):
                self.line.value = bit
                await ClockCycles(self.clk, self.divisor)
            self.sent += 1
        self.busy = False


class UartSink:
    """Reads bytes off ``line`` for ever (``start_soon(sink.run())``), sampling each bit in
    its middle; calls ``on_byte(byte)`` for each. A broken byte raises
    :class:`UartFramingError` (failing the test)."""

    def __init__(self, clk, line, divisor, on_byte):
        self.clk, self.line, self.divisor, self.on_byte = clk, line, divisor, on_byte
        self.received = 0
        self.busy = False

    async def run(self):
        while True:
            await FallingEdge(self.line)
            self.busy = True
            await ClockCycles(self.clk, self.divisor // 2)
            if int(self.line.value) != 0:
                raise UartFramingError(f"{self.line._name}: start bit not low in its middle")
            byte = 0
            for k in range(8):
                await ClockCycles(self.clk, self.divisor)
                byte |= int(self.line.value) << k
            await ClockCycles(self.clk, self.divisor)
            if int(self.line.value) != 1:
                raise UartFramingError(f"{self.line._name}: stop bit of {byte:#04x} is low")
            self.received += 1
            self.busy = False
            self.on_byte(byte)
