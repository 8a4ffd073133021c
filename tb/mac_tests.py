"""cocotb test of the zero-skip MAC against fabric.numerics (run by tests/test_mac_cocotb.py), in
either number format; :func:`operations` and :func:`expected` are shared with tests/test_mac.py.
"""

import warnings

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge

from wse.fabric import numerics
from wse.rtl.numfmt import number_format

from .router_tb import load_params

#: bf16 operands that are not just numbers: ±smallest and largest subnormal and normal, ±1,
#: ±inf and NaNs (canonical, signalling, negative with a payload).
SPECIAL16 = np.array([0x0001, 0x8001, 0x007F, 0x807F, 0x0080, 0x8080, 0x7F7F, 0xFF7F, 0x3F80,
                      0xBF80, 0x7F80, 0xFF80, 0x7FC0, 0x7F81, 0xFFC1])

#: Accumulators the same way (a NaN accumulator is canonical: the datapath makes no other).
SPECIAL32 = np.array([0x0000_0000, 0x0000_0001, 0x8000_0001, 0x007F_FFFF, 0x807F_FFFF,
                      0x0080_0000, 0x8080_0000, 0x7F7F_FFFF, 0xFF7F_FFFF, 0x3F80_0000,
                      0xBF80_0000, 0x7F80_0000, 0xFF80_0000, 0x7FC0_0000])


def _bf16_operands(rng, n):
    """bf16 patterns: 30 % ±0, 10 % specials, 20 % any pattern (every exponent), the rest
    numbers within a factor 2**9 of 1 (sums that round and cancel)."""
    pick = rng.random(n)
    near_one = (rng.integers(0, 2, n) << 15) | (rng.integers(118, 137, n) << 7) \
        | rng.integers(0, 128, n)
    bits = np.where(pick < 0.5, near_one, rng.integers(0, 1 << 16, n))
    bits = np.where(pick < 0.4, rng.choice(SPECIAL16, n), bits)
    return np.where(pick < 0.3, rng.choice([0x0000, 0x8000], n), bits)


def operations(fmt, rng, n):
    """``(a, b, acc)``: ``n`` random operations with 30 % zero operands on each side.

    Fixed point: operands over the whole range, accumulators too, some next to the bounds (to
    saturate). bf16: :func:`_bf16_operands`; accumulators a third any pattern or special, a
    quarter near ``-a * b`` (cancellation, often long), a fifth 2**9 to 2**16 times ``a * b``
    (rounding, often ties), the rest within a factor 2**9 of 1.
    """
    if not fmt.is_float:
        a = rng.integers(fmt.operand_min, fmt.operand_max + 1, n)
        b = rng.integers(fmt.operand_min, fmt.operand_max + 1, n)
        a[rng.random(n) < 0.3] = 0
        b[rng.random(n) < 0.3] = 0
        acc = rng.integers(fmt.acc_min, fmt.acc_max, n)
        acc[rng.random(n) < 0.05] = fmt.acc_max - 1
        acc[rng.random(n) < 0.05] = fmt.acc_min + 1
        return a, b, acc
    a, b = _bf16_operands(rng, n), _bf16_operands(rng, n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        product = numerics.multiply(fmt, a, b)
    pick = rng.random(n)
    sign, fraction = rng.integers(0, 2, n) << 31, rng.integers(0, 1 << 23, n)
    anything = np.where(pick < 0.2, rng.integers(0, 1 << 32, n), rng.choice(SPECIAL32, n))
    near = ((product ^ 0x8000_0000) + (rng.integers(-2, 3, n) << rng.integers(0, 24, n)))
    # 2**9 .. 2**16 times the product: its last bits fall below the sum's (often a tie)
    above = sign | (np.minimum(((product >> 23) & 0xFF) + rng.integers(9, 17, n), 254) << 23) \
        | fraction
    acc = np.where(pick < 0.8, above, sign | (rng.integers(118, 137, n) << 23) | fraction)
    acc = np.where(pick < 0.6, near, acc)
    acc = np.where(pick < 0.33, anything, acc) & 0xFFFF_FFFF
    return a, b, numerics.from_float32(numerics.as_float32(acc))     # NaNs canonical


def expected(fmt, a, b, acc):
    """``(sum, skipped, overflow)`` of each operation: a skipped one (a zero operand) leaves
    ``acc`` as it was and never overflows."""
    skipped = numerics.is_zero(fmt, a) | numerics.is_zero(fmt, b)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        total, overflow = numerics.accumulate(fmt, acc, numerics.multiply(fmt, a, b))
    return np.where(skipped, acc, total), skipped, overflow & ~skipped


@cocotb.test()
async def random_operands(dut):
    """Random operands with 30% zeros each side and overflowing accumulators, back to back."""
    params = load_params()
    fmt = number_format(params["fmt"])
    rng = np.random.default_rng(params.get("seed", 1))
    n = int(params.get("count", 2000))
    a, b, acc = operations(fmt, rng, n)
    want, skipped, want_over = expected(fmt, a, b, acc)
    bits = fmt.is_float                              # sums are bit patterns, not signed

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
            total = dut.sum.value
            got.append((total.to_unsigned() if bits else total.to_signed(),
                        int(dut.skip.value), int(dut.overflow.value)))
    await RisingEdge(dut.clk)
    await ReadOnly()
    bad = [i for i, g in enumerate(got) if g[0] != want[i]]
    assert not bad, (f"{len(bad)} sums differ from the golden model, first: operation {bad[0]}, "
                     f"{int(a[bad[0]]):#x} x {int(b[bad[0]]):#x} + {int(acc[bad[0]]):#x}: "
                     f"got {got[bad[0]][0]:#x}, want {int(want[bad[0]]):#x}")
    assert [g[1] for g in got] == list(skipped.astype(int)), "skip strobes differ"
    assert [g[2] for g in got] == list(want_over.astype(int)), "overflow differs"
    assert int(dut.overflowed.value) == int(want_over.any())
    cocotb.log.info("MAC %s: %d operations bit-exact, %d multiplies issued, %d skipped, "
                    "%d overflowed, %d cycles", fmt, n, int((~skipped).sum()),
                    int(skipped.sum()), int(want_over.sum()), n + 1)
