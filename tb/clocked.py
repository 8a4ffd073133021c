"""The clock, reset and once-a-cycle loop every stream testbench here shares."""

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge

__all__ = ["ClockedTB"]


class ClockedTB:
    """Owns ``dut.clk`` / ``dut.rst`` and steps the port models in :attr:`models`.

    Each :meth:`step` is one clock cycle: after the rising edge every model's ``drive`` sets
    what the DUT sees; in the read-only phase every model's ``sample`` reads the settled
    handshakes, so ``valid & ready`` is exactly the transfer the next edge makes.
    """

    def __init__(self, dut):
        self.dut = dut
        self.cycle = 0
        self.models = []

    async def start(self, reset_cycles=3):
        """Start the clock and hold reset for ``reset_cycles`` rising edges."""
        cocotb.start_soon(Clock(self.dut.clk, 10, unit="ns").start())
        self.dut.rst.value = 1
        for _ in range(reset_cycles):
            await RisingEdge(self.dut.clk)
        self.dut.rst.value = 0

    async def step(self):
        """One clock cycle: drive every port model, then sample the settled handshakes."""
        await RisingEdge(self.dut.clk)
        self.cycle += 1
        for model in self.models:
            model.drive(self.cycle)
        await ReadOnly()
        for model in self.models:
            model.sample(self.cycle)
