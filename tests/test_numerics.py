"""Fixed-point arithmetic: RTL (Amaranth simulator) against the numpy golden functions."""

import numpy as np
import pytest
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator

from wse.fabric import numerics
from wse.rtl.numfmt import FixedPoint, number_format


def test_requantise_rounds_half_to_even_like_numpy():
    fmt = FixedPoint(width=16, frac_bits=8, acc_width=32)
    acc = np.arange(-5000, 5000, dtype=np.int64) * 37
    got, overflow = numerics.requantise(fmt, acc)
    want = np.clip(np.round(acc / 256.0), -32768, 32767).astype(np.int64)
    assert (got == want).all() and not overflow.any()
    assert list(numerics.requantise(fmt, [128, 384, -128, -384, 129])[0]) == [0, 2, 0, -2, 1]


def test_requantise_saturates():
    fmt = FixedPoint()
    got, overflow = numerics.requantise(fmt, [1 << 30, -(1 << 30), 32767 << 8])
    assert list(got) == [32767, -32768, 32767] and list(overflow) == [True, True, False]


def test_accumulate_saturates():
    fmt = FixedPoint(acc_width=32)
    got, overflow = numerics.accumulate(fmt, [2**31 - 10, -2**31 + 5, 0], [100, -100, 7])
    assert list(got) == [2**31 - 1, -2**31, 7] and list(overflow) == [True, True, False]


def test_axpy_counts_and_skips():
    fmt = FixedPoint()
    acc, overflow, issued, skip_w, skip_a = numerics.axpy(fmt, [0, 0, 0, 0], 3, [1, 0, -2, 0])
    assert list(acc) == [3, 0, -6, 0] and (issued, skip_w, skip_a) == (2, 0, 2) and not overflow
    acc, _, issued, skip_w, skip_a = numerics.axpy(fmt, [1, 2], 0, [5, 6])
    assert list(acc) == [1, 2] and (issued, skip_w, skip_a) == (0, 2, 0)


def test_operand_range_is_checked():
    with pytest.raises(ValueError, match=r"^weights must fit in int16 \(-32768\.\.32767\), "
                                         r"not 40000$"):
        numerics.check_operands(FixedPoint(), [1, 40000], "weights")


@pytest.mark.parametrize("kwargs, message", [
    ({"width": 1}, r"^Operand width must be an integer in 2\.\.31, not 1$"),
    ({"width": 32}, r"^Operand width must be an integer in 2\.\.31, not 32$"),
    ({"width": 24, "acc_width": 64}, r"^acc_width must be an integer in 48\.\.62, not 64$"),
    ({"frac_bits": 16}, r"^frac_bits must be an integer in 0\.\.15, not 16$"),
    ({"acc_width": 24}, r"^acc_width must be an integer in 32\.\.62, not 24$"),
])
def test_format_parameters_are_checked(kwargs, message):
    with pytest.raises(ValueError, match=message):
        FixedPoint(**kwargs)


def test_a_format_has_the_users_name_and_says_whether_it_is_floating_point():
    """One name per format, the one ``--format`` takes, in ``to_dict`` too; ``is_float`` is how
    every layer asks; a fixed point's fields named ``"fixed"`` (written before) still read."""
    int16, bf16 = number_format("int16"), number_format("bf16")
    int8 = FixedPoint(width=8, frac_bits=3, acc_width=16)
    assert (int16.name, bf16.name, int8.name) == ("int16", "bf16", "int8")
    assert (int16.is_float, bf16.is_float) == (False, True)
    assert int16.to_dict() == {"name": "int16", "width": 16, "frac_bits": 8, "acc_width": 32}
    for fmt in (int16, bf16, int8):
        assert number_format(fmt.to_dict()) == fmt
    assert number_format({"name": "fixed", "width": 16, "frac_bits": 4, "acc_width": 32}) == \
        FixedPoint(frac_bits=4)
    with pytest.raises(ValueError, match="number format must be one of int16, bf16"):
        number_format({"name": "int8", "width": 16})


def test_widening_bf16_to_binary32_is_exact():
    bits = np.array([0x0000, 0x8000, 0x3F80, 0xC2F7, 0x7F80, 0x0001])
    wide = numerics.widen(bits)
    assert wide.tolist() == [b << 16 for b in bits.tolist()]
    np.testing.assert_array_equal(numerics.as_float32(wide), numerics.as_float32(bits, True))


@pytest.mark.parametrize("fmt", [FixedPoint(), FixedPoint(width=8, frac_bits=3, acc_width=16),
                                 FixedPoint(frac_bits=0)], ids=repr)
def test_rtl_requantise_and_accumulate_match_golden(fmt):
    rng = np.random.default_rng(5)
    accs = np.concatenate([rng.integers(fmt.acc_min, fmt.acc_max, 300),
                           [fmt.acc_min, fmt.acc_max, 0, -1, 1 << fmt.frac_bits >> 1]])
    products = rng.integers(-(1 << (2 * fmt.width - 2)), 1 << (2 * fmt.width - 2), accs.size)
    acc = Signal(fmt.acc_shape)
    product = Signal(fmt.product_shape)
    m = Module()
    q, q_over = fmt.requantise(acc)
    s, s_over = fmt.accumulate(acc, product)
    q_sig, q_o, s_sig, s_o = (Signal(fmt.operand_shape), Signal(), Signal(fmt.acc_shape),
                              Signal())
    m.d.comb += [q_sig.eq(q), q_o.eq(q_over), s_sig.eq(s), s_o.eq(s_over)]
    want_q, want_qo = numerics.requantise(fmt, accs)
    want_s, want_so = numerics.accumulate(fmt, accs, products)
    got = []

    async def bench(ctx):
        for a, p in zip(accs, products):
            ctx.set(acc, int(a))
            ctx.set(product, int(p))
            got.append((ctx.get(q_sig), ctx.get(q_o), ctx.get(s_sig), ctx.get(s_o)))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    assert [g[0] for g in got] == list(want_q)
    assert [bool(g[1]) for g in got] == list(want_qo)
    assert [g[2] for g in got] == list(want_s)
    assert [bool(g[3]) for g in got] == list(want_so)


@pytest.mark.parametrize("fmt", [FixedPoint(), FixedPoint(width=8, frac_bits=3, acc_width=16)],
                         ids=repr)
def test_rtl_results_have_exact_shapes_and_chain(fmt):
    """accumulate -> accumulate -> requantise, as the partial-sum engine chains them."""
    acc = Signal(fmt.acc_shape)
    s1, _ = fmt.accumulate(acc, Signal(fmt.acc_shape))
    s2, _ = fmt.accumulate(s1, Signal(fmt.acc_shape))
    q, _ = fmt.requantise(s2)
    assert s1.shape() == fmt.acc_shape and s2.shape() == fmt.acc_shape
    assert q.shape() == fmt.operand_shape
    out = Signal(fmt.operand_shape)
    m = Module()
    m.d.comb += out.eq(q)
    values = [fmt.acc_min, -(1 << (fmt.frac_bits + 3)), -1, 0, 1 << (fmt.frac_bits + 2),
              fmt.acc_max]
    got = []

    async def bench(ctx):
        for v in values:
            ctx.set(acc, v)
            got.append(ctx.get(out))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    assert got == list(numerics.requantise(fmt, values)[0])
