"""The bf16 hardware arithmetic (rtl/bfloat.py) in Amaranth's simulator, against fabric.numerics:
multiply, accumulate and requantise bit for bit, on random patterns over every exponent and on
the cases that are hard to get right (subnormals, ±0, ±inf, NaN, cancellation, rounding ties,
overflow)."""

import warnings
from fractions import Fraction

import numpy as np
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator

from wse.fabric import numerics
from wse.rtl.bfloat import CANONICAL_NAN16, CANONICAL_NAN32, BFloat16

FMT = BFloat16()

#: bf16: ±0, ±smallest and largest subnormal, ±smallest and largest normal, ±1, ±inf, NaNs
#: (canonical, a signalling one, a negative one with a payload), and a few more values.
SPECIAL16 = [0x0000, 0x8000, 0x0001, 0x8001, 0x007F, 0x807F, 0x0080, 0x8080, 0x7F7F, 0xFF7F,
             0x3F80, 0xBF80, 0x7F80, 0xFF80, 0x7FC0, 0x7F81, 0xFFC1, 0x4000, 0x3F00, 0x0040,
             0x1F80, 0x5F80]

#: The same for binary32, and the largest values below 1 and 2.
SPECIAL32 = [0x0000_0000, 0x8000_0000, 0x0000_0001, 0x8000_0001, 0x007F_FFFF, 0x807F_FFFF,
             0x0080_0000, 0x8080_0000, 0x7F7F_FFFF, 0xFF7F_FFFF, 0x3F80_0000, 0xBF80_0000,
             0x7F80_0000, 0xFF80_0000, 0x7FC0_0000, 0x7F80_0001, 0xFFC0_0001, 0x3F7F_FFFF,
             0x3FFF_FFFF, 0x0040_0000, 0x0080_0001, 0x7F00_0000]


def evaluate(build, widths, columns):
    """Evaluate combinational hardware in Amaranth's simulator.

    ``build(*inputs)`` returns the Values under test for input Signals of ``widths``;
    ``columns`` holds one sequence of inputs per Signal. Returns one ``int64`` array per output.
    """
    m = Module()
    inputs = [Signal(width) for width in widths]
    outputs = []
    for value in build(*inputs):
        signal = Signal.like(value)
        m.d.comb += signal.eq(value)
        outputs.append(signal)
    rows = list(zip(*(np.asarray(c, dtype=np.int64).tolist() for c in columns)))
    got = []

    async def bench(ctx):
        for row in rows:
            for signal, value in zip(inputs, row):
                ctx.set(signal, value)
            got.append([ctx.get(signal) for signal in outputs])

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    return [np.array(column, dtype=np.int64) for column in zip(*got)]


def assert_bits(name, inputs, got, want):
    """``got == want`` element by element; else the first few differences, in hex."""
    want = np.asarray(want, dtype=np.int64)
    bad = np.flatnonzero(got != want)
    shown = "; ".join(f"{' '.join(hex(int(i[k])) for i in inputs)}: got {int(got[k]):#x}, "
                      f"want {int(want[k]):#x}" for k in bad[:5])
    assert not bad.size, f"{name}: {bad.size} of {len(got)} differ ({shown})"


def bf16_bits(rng, n, exponents=(0, 256)):
    """``n`` random bf16 patterns, either sign, exponent fields uniform in ``exponents``."""
    return ((rng.integers(0, 2, n) << 15) | (rng.integers(*exponents, n) << 7)
            | rng.integers(0, 1 << 7, n))


def exact(bits, operand=False):
    """The exact rational value of finite bit patterns."""
    values = numerics.as_float32(bits, operand).astype(np.float64)
    return [Fraction(float(v)) for v in values]


def ties(values):
    """How many of the rational ``values`` lie exactly halfway between two neighbouring
    binary32 numbers (their unit in the last place: ``2 ** (exponent - 23)``, at least
    ``2 ** -149``)."""
    count = 0
    for v in map(abs, values):
        if v:
            e = v.numerator.bit_length() - v.denominator.bit_length()
            e -= Fraction(2) ** e > v                      # floor(log2(v))
            count += (v / Fraction(2) ** (max(e, -126) - 23)).denominator == 2
    return count


def golden(function, *columns):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)      # NaN casts in ml_dtypes
        return function(FMT, *columns)


# -- multiply ------------------------------------------------------------------------------------

def multiply_cases():
    """(a, b, tie count): every pair of specials, random patterns over all exponents, products
    below the normal range (subnormal operands, exponents summing to ~100..127, significands
    with few bits so that many are ties) and near the top of the range."""
    rng = np.random.default_rng(16)
    special = np.array(SPECIAL16)
    a, b = [np.repeat(special, special.size)], [np.tile(special, special.size)]
    a.append(rng.integers(0, 1 << 16, 2000))
    b.append(rng.integers(0, 1 << 16, 2000))
    n = 1500
    exponent_a = rng.integers(0, 128, n)
    exponent_a[:200] = 0                             # subnormal times subnormal or normal
    exponent_b = np.clip(rng.integers(100, 116, n) - exponent_a, 0, 254)
    few = [0x00, 0x40, 0x20, 0x60, 0x10, 0x7F, 0x01, 0x3F]
    a.append((rng.integers(0, 2, n) << 15) | (exponent_a << 7) | rng.choice(few, n))
    b.append((rng.integers(0, 2, n) << 15) | (exponent_b << 7) | rng.choice(few, n))
    a.append(bf16_bits(rng, 500, (190, 255)))       # overflow to inf, or just not
    b.append(bf16_bits(rng, 500, (64, 255)))
    a, b = np.concatenate(a), np.concatenate(b)
    finite = (a & 0x7F80) != 0x7F80
    finite &= (b & 0x7F80) != 0x7F80
    products = [x * y for x, y in zip(exact(a[finite], True), exact(b[finite], True))]
    return a, b, ties(products)


def test_multiply_matches_golden():
    a, b, tie_count = multiply_cases()
    (got,) = evaluate(lambda x, y: [FMT.multiply(x, y)], [16, 16], [a, b])
    want = golden(numerics.multiply, a, b)
    assert_bits("multiply", (a, b), got, want)
    assert tie_count >= 50
    assert (got == CANONICAL_NAN32).sum() >= 100
    print(f"multiply: {a.size} cases bit-exact, {tie_count} ties in the subnormal range, "
          f"{int(((got & 0x7F80_0000) == 0).sum())} zero or subnormal products")


# -- accumulate ----------------------------------------------------------------------------------

def accumulate_cases():
    """(acc, product): every pair of specials; random patterns; exponent distances 0..30 with
    either sign; near cancellations (``-x`` give or take a few units in the last place, and
    ``-x`` with a few low bits changed: long normalisation shifts); exact cancellations; sums
    exactly halfway between two binary32 numbers; large sums that overflow; and MAC-like
    additions of bf16 x bf16 products to random accumulators."""
    rng = np.random.default_rng(32)
    special = np.array(SPECIAL32)
    x, y = [np.repeat(special, special.size)], [np.tile(special, special.size)]
    x.append(rng.integers(0, 1 << 32, 800))
    y.append(rng.integers(0, 1 << 32, 800))
    n = 600                                           # exponent distances 0..30
    base = rng.integers(0, 1 << 32, n)
    exponent = np.clip(((base >> 23) & 0xFF) + rng.integers(-30, 31, n), 0, 254)
    x.append(base)
    y.append((rng.integers(0, 1 << 32, n) & 0x807F_FFFF) | (exponent << 23))
    n = 600                                           # near cancellation
    base = rng.integers(0, 1 << 32, n) & 0xFF7F_FFFF
    x.append(base)
    y.append((base ^ 0x8000_0000) + (rng.integers(-3, 4, n) << rng.integers(0, 23, n)))
    n = 100                                           # exact cancellation, and the sign of 0
    base = rng.integers(0, 1 << 32, n) & 0xFF7F_FFFF
    x.append(base)
    y.append(base ^ 0x8000_0000)
    n = 600                                           # ties: half or 3/2 of an ulp of x
    base = rng.integers(0, 1 << 32, n) & 0xFF7F_FFFF
    base |= np.maximum((base >> 23) & 0xFF, 25) << 23
    sign = rng.integers(0, 2, n) << 31
    half = (((base >> 23) & 0xFF) - 24) << 23
    x.append(base)
    y.append(sign | np.where(rng.integers(0, 2, n) == 1, half, half + (1 << 23) + (1 << 22)))
    n = 200                                           # overflow, or just not
    x.append((rng.integers(0, 2, n) << 31) | (rng.integers(0xFC, 0xFF, n) << 23)
             | rng.integers(0, 1 << 23, n))
    y.append((rng.integers(0, 2, n) << 31) | (rng.integers(0xF0, 0xFF, n) << 23)
             | rng.integers(0, 1 << 23, n))
    n = 600                                           # as the MAC adds
    x.append(rng.integers(0, 1 << 32, n))
    y.append(golden(numerics.multiply, bf16_bits(rng, n, (64, 192)), bf16_bits(rng, n, (64, 192))))
    x, y = np.concatenate(x) & 0xFFFF_FFFF, np.concatenate(y) & 0xFFFF_FFFF
    return x, y


def test_accumulate_matches_golden():
    x, y = accumulate_cases()
    got, got_over = evaluate(lambda a, b: FMT.accumulate(a, b), [32, 32], [x, y])
    want, want_over = golden(numerics.accumulate, x, y)
    assert_bits("accumulate", (x, y), got, want)
    assert_bits("accumulate overflow", (x, y), got_over, want_over)
    finite = ((x & 0x7F80_0000) != 0x7F80_0000) & ((y & 0x7F80_0000) != 0x7F80_0000)
    tie_count = ties([p + q for p, q in zip(exact(x[finite]), exact(y[finite]))])
    cancelled = int((((x ^ y) == 0x8000_0000) & finite & (got == 0)).sum())
    assert tie_count >= 200 and cancelled >= 100 and got_over.sum() >= 20
    print(f"accumulate: {x.size} cases bit-exact, {tie_count} ties, {cancelled} exact "
          f"cancellations to +0, {int(got_over.sum())} overflows")


# -- requantise ----------------------------------------------------------------------------------

def requantise_cases():
    """Specials; random patterns; every low half that matters (0, just below, at and just
    above the half, all ones) under random high halves over all exponents, the subnormals and
    the largest finite numbers (which round to ±inf from the half up)."""
    rng = np.random.default_rng(8)
    lows = np.array([0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF])
    highs = np.concatenate([bf16_bits(rng, 400), rng.integers(0, 0x80, 100) | (rng.integers(
        0, 2, 100) << 15), [0x7F7F, 0xFF7F, 0x007F, 0x807F, 0x0000, 0x8000, 0x7F7E, 0x7F80]])
    largest = (rng.choice([0x7F7F, 0xFF7F], 40) << 16) | rng.integers(0x7FF0, 0x10000, 40)
    x = np.concatenate([SPECIAL32, rng.integers(0, 1 << 32, 1000), largest,
                        (np.repeat(highs, lows.size) << 16) | np.tile(lows, highs.size)])
    return x


def test_requantise_matches_golden():
    x = requantise_cases()
    got, got_over = evaluate(lambda a: FMT.requantise(a), [32], [x])
    want, want_over = golden(numerics.requantise, x)
    assert_bits("requantise", (x,), got, want)
    assert_bits("requantise overflow", (x,), got_over, want_over)
    assert (got == CANONICAL_NAN16).sum() >= 10 and got_over.sum() >= 10
    print(f"requantise: {x.size} cases bit-exact, {int(((x & 0xFFFF) == 0x8000).sum())} ties, "
          f"{int(got_over.sum())} overflows")


#: (a, b, product): what IEEE says, written out.
MULTIPLY_DIRECTED = [
    (0x3F80, 0x3F80, 0x3F80_0000),          # 1 x 1
    (0x8000, 0x3F80, 0x8000_0000),          # -0 x 1 = -0
    (0x8000, 0x8001, 0x0000_0000),          # -0 x -subnormal = +0
    (0x0001, 0x0001, 0x0000_0000),          # 2**-133 squared: far below the smallest subnormal
    (0x3400, 0x0001, 0x0000_0000),          # 2**-23 x 2**-133 = 2**-156: rounds to +0
    (0x3780, 0x0001, 0x0000_0001),          # 2**-16 x 2**-133: the smallest subnormal
    (0x3700, 0x8001, 0x8000_0000),          # 2**-150, a tie: to even, -0
    (0x3740, 0x0001, 0x0000_0001),          # 1.5 x 2**-150: up
    (0x3FC0, 0x007F, 0x00BE_8000),          # 1.5 x the largest subnormal: exact, normal
    (0x7F80, 0x0000, CANONICAL_NAN32),      # inf x 0
    (0xFF80, 0x0001, 0xFF80_0000),          # -inf x smallest subnormal
    (0x7F7F, 0x7F7F, 0x7F80_0000),          # largest squared: inf
    (0xFFC1, 0x3F80, CANONICAL_NAN32),      # a NaN with a payload and a sign
]

#: (acc, product, sum, overflow).
ACCUMULATE_DIRECTED = [
    (0x3F80_0000, 0xBF80_0000, 0x0000_0000, 0),     # 1 - 1 = +0
    (0x8000_0000, 0x8000_0000, 0x8000_0000, 0),     # -0 + -0 = -0
    (0x0000_0000, 0x8000_0000, 0x0000_0000, 0),     # +0 + -0 = +0
    (0x7F80_0000, 0xFF80_0000, CANONICAL_NAN32, 0),  # inf - inf: NaN, acc was not finite
    (0x3F80_0000, 0x7F80_0001, CANONICAL_NAN32, 1),  # 1 + NaN: overflow
    (0x7F7F_FFFF, 0x7300_0000, 0x7F80_0000, 1),     # largest + half its ulp: a tie, up to inf
    (0x7F7F_FFFF, 0x72FF_FFFF, 0x7F7F_FFFF, 0),     # just below the tie
    (0x3F80_0001, 0xBF80_0000, 0x3400_0000, 0),     # 1 + ulp - 1 = 2**-23: 23-bit shift
    (0x0080_0000, 0x8000_0001, 0x007F_FFFF, 0),     # smallest normal - smallest subnormal
    (0x007F_FFFF, 0x0000_0001, 0x0080_0000, 0),     # largest subnormal + smallest: normal
    (0x3F80_0000, 0x3380_0000, 0x3F80_0000, 0),     # 1 + 2**-24: a tie, to even (down)
    (0x3F80_0001, 0x3380_0000, 0x3F80_0002, 0),     # 1 + ulp + 2**-24: a tie, to even (up)
]


def test_directed_cases():
    """A few cases written out from IEEE 754 (so numerics is checked too)."""
    a, b, want = (np.array(c) for c in zip(*MULTIPLY_DIRECTED))
    (got,) = evaluate(lambda x, y: [FMT.multiply(x, y)], [16, 16], [a, b])
    assert_bits("multiply", (a, b), got, want)
    assert_bits("numerics.multiply", (a, b), golden(numerics.multiply, a, b), want)
    x, y, want, want_over = (np.array(c) for c in zip(*ACCUMULATE_DIRECTED))
    got, got_over = evaluate(lambda p, q: FMT.accumulate(p, q), [32, 32], [x, y])
    golden_sum, golden_over = golden(numerics.accumulate, x, y)
    for name, result in [("accumulate", got), ("numerics.accumulate", golden_sum)]:
        assert_bits(name, (x, y), result, want)
    for name, result in [("overflow", got_over), ("numerics overflow", golden_over)]:
        assert_bits(name, (x, y), result, want_over)
