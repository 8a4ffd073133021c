"""cocotb test of the zero-skip MAC against fabric.numerics (run by tests/test_mac_cocotb.py)."""

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge

from wse.fabric import numerics
from wse.rtl.numfmt import FixedPoint

from .router_tb import load_params


@cocotb.test()
async def random_operands(dut):
    """Random operands with 30% zeros each side and saturating accumulators, back to back."""
    params = load_params()
    fmt = FixedPoint(**params["fmt"])
    rng = np.random.default_rng(params.get("seed", 1))
    n = int(params.get("count", 2000))
    a = rng.integers(fmt.operand_min, fmt.operand_max + 1, n)
    b = rng.integers(fmt.operand_min, fmt.operand_max + 1, n)
    a[rng.random(n) < 0.3] = 0
    b[rng.random(n) < 0.3] = 0
    acc = rng.integers(fmt.acc_min, fmt.acc_max, n)
    acc[rng.random(n) < 0.05] = fmt.acc_max - 1
    acc[rng.random(n) < 0.05] = fmt.acc_min + 1
    want, want_over = numerics.accumulate(fmt, acc, numerics.multiply(fmt, a, b))
    skipped = (a == 0) | (b == 0)

    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    dut.valid.value = 0
    dut.clear.value = 0
    await RisingEdge(dut.clk)
    await RisingEdge(dut.clk)
    dut.rst.value = 0
    got = []
    for cycle in range(n + 1):
        await RisingEdge(dut.clk)
        if cycle < n:
            dut.valid.value = 1
            dut.a.value = int(a[cycle])
            dut.b.value = int(b[cycle])
        else:
            dut.valid.value = 0
        if cycle:
            dut.acc.value = int(acc[cycle - 1])
        await ReadOnly()
        if cycle:
            assert dut.s1_valid.value == 1
            got.append((dut.sum.value.to_signed(), int(dut.skip.value),
                        int(dut.overflow.value)))
    await RisingEdge(dut.clk)
    await ReadOnly()
    assert [g[0] for g in got] == list(want), "sums differ from the golden model"
    assert [g[1] for g in got] == list(skipped.astype(int)), "skip strobes differ"
    assert [g[2] for g in got] == list((want_over & ~skipped).astype(int)), "overflow differs"
    assert int(dut.overflowed.value) == int(want_over.any())
    cocotb.log.info("MAC %s: %d operations bit-exact, %d multiplies issued, %d skipped, "
                    "%d saturated, %d cycles", fmt, n, int((~skipped).sum()),
                    int(skipped.sum()), int(want_over.sum()), n + 1)
