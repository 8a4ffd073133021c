"""ShiftFIFO against amaranth's SyncFIFO, cycle for cycle, under random reads and writes."""

import random

import pytest
from amaranth.hdl import Module
from amaranth.lib.fifo import SyncFIFO
from amaranth.sim import Simulator

from wse.rtl.shift_fifo import ShiftFIFO


@pytest.mark.parametrize("depth", [1, 2, 3, 4])
def test_same_as_syncfifo(depth):
    m = Module()
    m.submodules.ref = ref = SyncFIFO(width=8, depth=depth)
    m.submodules.dut = dut = ShiftFIFO(width=8, depth=depth)
    rng = random.Random(depth)
    mismatches = []

    async def bench(ctx):
        for cycle in range(3000):
            w_en, r_en, w_data = rng.random() < 0.6, rng.random() < 0.5, rng.randrange(256)
            for fifo in (ref, dut):
                ctx.set(fifo.w_en, w_en)
                ctx.set(fifo.r_en, r_en)
                ctx.set(fifo.w_data, w_data)
            got = [ctx.get(dut.w_rdy), ctx.get(dut.r_rdy), ctx.get(dut.level)]
            want = [ctx.get(ref.w_rdy), ctx.get(ref.r_rdy), ctx.get(ref.level)]
            if want[1]:
                got.append(ctx.get(dut.r_data))
                want.append(ctx.get(ref.r_data))
            if got != want:
                mismatches.append((cycle, got, want))
            await ctx.tick()

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert not mismatches, mismatches[:5]


def test_depth_is_checked():
    with pytest.raises(ValueError, match="depth must be a positive integer, not 0"):
        ShiftFIFO(width=8, depth=0)
