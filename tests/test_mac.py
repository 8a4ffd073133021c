"""The zero-skip MAC in Amaranth's simulator, against fabric.numerics."""

import numpy as np
import pytest
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator

from wse.fabric import numerics
from wse.rtl.mac import Mac
from wse.rtl.numfmt import BFloat16, FixedPoint
from wse.tb.mac_tests import expected, operations


def run_mac(fmt, ops):
    """``ops``: [(a, b, acc)] one per cycle; returns [(sum, skip, overflow)] and final sticky."""
    dut = Mac(fmt)
    out = []
    sticky = []

    async def bench(ctx):
        for cycle in range(len(ops) + 1):
            if cycle < len(ops):
                a, b, _ = ops[cycle]
                ctx.set(dut.valid, 1)
                ctx.set(dut.a, int(a))
                ctx.set(dut.b, int(b))
            else:
                ctx.set(dut.valid, 0)
            if cycle:
                ctx.set(dut.acc, int(ops[cycle - 1][2]))
                assert ctx.get(dut.s1_valid)
                out.append((ctx.get(dut.sum), ctx.get(dut.skip), ctx.get(dut.overflow)))
            await ctx.tick()
        sticky.append(ctx.get(dut.overflowed))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return out, sticky[0]


@pytest.mark.parametrize("fmt", [FixedPoint(), FixedPoint(width=8, frac_bits=2, acc_width=16)],
                         ids=repr)
def test_mac_matches_golden_with_zeros_and_saturation(fmt):
    rng = np.random.default_rng(11)
    n = 400
    a = rng.integers(fmt.operand_min, fmt.operand_max + 1, n)
    b = rng.integers(fmt.operand_min, fmt.operand_max + 1, n)
    a[rng.random(n) < 0.3] = 0
    b[rng.random(n) < 0.3] = 0
    acc = rng.integers(fmt.acc_min, fmt.acc_max, n)
    acc[:20] = fmt.acc_max - 3             # saturation upwards and downwards
    acc[20:40] = fmt.acc_min + 3
    out, sticky = run_mac(fmt, list(zip(a, b, acc)))
    want, want_over = numerics.accumulate(fmt, acc, numerics.multiply(fmt, a, b))
    skipped = (a == 0) | (b == 0)
    assert [o[0] for o in out] == list(want)
    assert [bool(o[1]) for o in out] == list(skipped)
    assert [bool(o[2]) for o in out] == list(want_over & ~skipped)
    assert sticky == int(want_over.any())
    print(f"MAC {fmt}: {n} operations, {int(skipped.sum())} skipped (no multiply), "
          f"{int(want_over.sum())} saturated")


@pytest.mark.parametrize("fmt", [FixedPoint(), BFloat16()], ids=repr)
def test_mac_random_operations_match_golden(fmt):
    """The operations of the cocotb test (tb/mac_tests.py): bf16 over every exponent, with
    specials, cancellations and ±0 (a skipped operation leaves even a -0 accumulator as it
    was, and never overflows, even for 0 x inf)."""
    a, b, acc = operations(fmt, np.random.default_rng(5), 600)
    out, sticky = run_mac(fmt, list(zip(a, b, acc)))
    want, skipped, want_over = expected(fmt, a, b, acc)
    assert [o[0] for o in out] == list(want)
    assert [bool(o[1]) for o in out] == list(skipped)
    assert [bool(o[2]) for o in out] == list(want_over)
    assert sticky == int(want_over.any())
    print(f"MAC {fmt}: {len(a)} operations, {int(skipped.sum())} skipped, "
          f"{int(want_over.sum())} overflowed")


def test_bf16_skip_keeps_the_accumulator():
    """A ±0 operand: the sum is ``acc`` itself, ``-0`` and ``inf`` included (IEEE would give
    ``+0`` for ``-0 + +0`` and NaN for ``0 x inf``), and no overflow."""
    fmt = BFloat16()
    ops = [(0x0000, 0x3F80, 0x8000_0000), (0x8000, 0x7F80, 0x3F80_0000),
           (0x7F80, 0x0000, 0x7F7F_FFFF), (0x8000, 0x8000, 0x8000_0000),
           (0x7FC0, 0x8000, 0x0000_0001), (0x3F80, 0x3F80, 0x8000_0000)]
    out, sticky = run_mac(fmt, ops)
    assert out == [(0x8000_0000, 1, 0), (0x3F80_0000, 1, 0), (0x7F7F_FFFF, 1, 0),
                   (0x8000_0000, 1, 0), (0x0000_0001, 1, 0), (0x3F80_0000, 0, 0)]
    assert sticky == 0


def test_format_must_be_a_number_format():
    with pytest.raises(TypeError, match="^Number format must be a FixedPoint or a BFloat16, "
                                        "not 'int16'$"):
        Mac("int16")


@pytest.mark.parametrize("fmt", [FixedPoint(), FixedPoint(width=8, frac_bits=3, acc_width=20),
                                 FixedPoint(width=8, frac_bits=0, acc_width=16),
                                 FixedPoint(width=4, frac_bits=2, acc_width=8)],
                         ids=str)
def test_saturation_matches_the_golden_model(fmt):
    """``FixedPoint.accumulate`` and ``requantise`` (saturation from the sign bits, no
    comparators: the core's adders are its critical paths) agree bit for bit with the golden
    model's ``numerics.accumulate`` and ``requantise``, at the bounds, around the rounding half
    and at random."""
    m = Module()
    a, b = Signal(fmt.acc_shape), Signal(fmt.acc_shape)
    outs = []
    for x in (*fmt.accumulate(a, b), *fmt.requantise(a)):
        s = Signal.like(x)
        m.d.comb += s.eq(x)
        outs.append(s)
    rng = np.random.default_rng(0)
    w = fmt.acc_width
    lo, hi = -(1 << (w - 1)), (1 << (w - 1)) - 1
    near = 1 << (fmt.width + fmt.frac_bits - 1)
    edges = [lo, hi, lo + 1, hi - 1, 0, 1, -1, near, -near, near - 1, -near - 1,
             1 << fmt.frac_bits >> 1, 3 << fmt.frac_bits >> 1, -(1 << fmt.frac_bits >> 1)]
    values = edges + [int(v) for v in rng.integers(lo, hi, 500)] \
        + [int(v) for v in rng.integers(-2 * near, 2 * near, 500)]

    async def bench(ctx):
        for x in values:
            want_q, want_qo = numerics.requantise(fmt, np.array([x]))
            for y in edges + [int(rng.integers(lo, hi))]:
                ctx.set(a, x)
                ctx.set(b, y)
                got = [ctx.get(s) for s in outs]
                want_s, want_so = numerics.accumulate(fmt, np.array([x]), np.array([y]))
                assert got[0:2] == [int(want_s[0]), int(want_so[0])], (x, y)
                assert got[2:4] == [int(want_q[0]), int(want_qo[0])], x

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
