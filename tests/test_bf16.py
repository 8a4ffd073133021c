"""bf16 in the golden models: the arithmetic against an independent reference written from
``docs/numerics.md`` alone, GEMMs of both golden models against it, zero-skip as in int16, and
the format's option and errors. The RTL's side: tests/test_bfloat.py (the arithmetic),
tests/test_mac_cocotb.py and tests/test_mesh_bf16.py (cocotb)."""

import ml_dtypes
import numpy as np
import pytest
from click.testing import CliRunner

from wse.fabric import numerics
from wse.fabric.compiler import compile_gemm
from wse.fabric.config import MeshConfig
from wse.fabric.cycle_model import predict_cycles
from wse.fabric.reference import gemm_reference
from wse.host.cli import main
from wse.rtl.core_params import CoreParams
from wse.rtl.numfmt import BFloat16, FixedPoint, number_format
from wse.runtime import GoldenSystem

from .gemm_runs import run_gemm

BF16 = BFloat16()
SPECIALS = np.array([0x0000, 0x8000, 0x0001, 0x8001, 0x007F, 0x0080, 0x7F7F, 0xFF7F, 0x3F80,
                     0xBF80, 0x7F80, 0xFF80, 0x7FC0, 0xFFC1, 0x7F81], dtype=np.int64)


def bf16_operands(rng, shape, *, zeros=0.3, special=0.1, wild=0.1):
    """bf16 bit patterns: normal numbers near 1 (so sums stay finite and cancel), with a
    fraction ``zeros`` of ±0, ``special`` of :data:`SPECIALS` (subnormals, extremes, ±inf,
    NaNs) and ``wild`` of any pattern at all (the whole exponent range)."""
    values = rng.standard_normal(shape) * 2.0 ** rng.integers(-6, 7, shape)
    bits = numerics.encode(BF16, values)[0]
    pick = rng.random(shape)
    bits = np.where(pick < zeros, rng.choice([0, 0x8000], shape), bits)
    bits = np.where((pick >= zeros) & (pick < zeros + special), rng.choice(SPECIALS, shape), bits)
    return np.where(pick >= 1 - wild, rng.integers(0, 1 << 16, shape), bits)


def f32(bits, operand=False):
    """One bit pattern as a numpy float32 scalar (bf16 operand: the high half)."""
    return np.array([bits << 16 if operand else bits], dtype=np.uint32).view(np.float32)[0]


def reference(config, program, W, X):
    """``docs/numerics.md``'s definition, one scalar at a time: per row, every product of a
    nonzero weight and a nonzero activation (each rounded to binary32) added in stream order
    to a +0 accumulator; down the psum chain to the owner, which adds its northern then its
    southern sum; ``(Y bf16 bits, raw binary32 bits)``, NaNs canonical."""
    R = config.rows
    feats = [program.in_placement.features_of(r) for r in range(R)]
    owners = program.out_placement.row_of
    raw = np.zeros((W.shape[0], X.shape[1]), dtype=np.int64)
    with np.errstate(all="ignore"):
        for o in range(W.shape[0]):
            for t in range(X.shape[1]):
                acc = []
                for r in range(R):
                    a = np.float32(0)
                    for i in feats[r]:
                        w, x = int(W[o, i]), int(X[i, t])
                        if w & 0x7FFF and x & 0x7FFF:
                            a = np.float32(a + np.float32(f32(w, True) * f32(x, True)))
                    acc.append(a)
                owner = int(owners[o])
                down = acc[0]
                for r in range(1, owner):
                    down = np.float32(acc[r] + down)
                up = acc[R - 1]
                for r in range(R - 2, owner, -1):
                    up = np.float32(acc[r] + up)
                s = acc[owner]
                if owner > 0:
                    s = np.float32(s + down)
                if owner < R - 1:
                    s = np.float32(s + up)
                raw[o, t] = 0x7FC00000 if np.isnan(s) else int(np.array([s]).view(np.uint32)[0])
    y = np.array([numerics.as_float32(raw)]).astype(ml_dtypes.bfloat16).view(np.uint16)[0]
    y = np.where(np.isnan(numerics.as_float32(raw)), 0x7FC0, y.astype(np.int64))
    return y, raw


# The arithmetic -------------------------------------------------------------------------------

@pytest.mark.filterwarnings("ignore:overflow encountered", "ignore:invalid value encountered")
def test_products_sums_and_rounding_follow_ieee_with_canonical_nans():
    rng = np.random.default_rng(1)
    a, b = rng.integers(0, 1 << 16, 4000), rng.integers(0, 1 << 16, 4000)
    p = numerics.multiply(BF16, a, b)
    for k in range(4000):
        want = np.float32(f32(int(a[k]), True) * f32(int(b[k]), True))
        got = f32(int(p[k]))
        assert (np.isnan(want) and p[k] == 0x7FC00000) or got.tobytes() == want.tobytes()
    acc = rng.integers(0, 1 << 32, 4000)
    s, over = numerics.accumulate(BF16, acc, p)
    for k in range(0, 4000, 7):
        want = np.float32(f32(int(acc[k])) + f32(int(p[k])))
        assert (np.isnan(want) and s[k] == 0x7FC00000) or f32(int(s[k])).tobytes() == \
            want.tobytes()
        assert over[k] == (np.isfinite(f32(int(acc[k]))) and not np.isfinite(want))
    # round to nearest even on the bit pattern, across subnormals, to inf on overflow
    ties = np.array([0x3F808000, 0x3F818000, 0x00008000, 0x00018000, 0x7F7F8000, 0x7F7F7FFF,
                     0xFFC00001, 0x80000000])
    y, over = numerics.requantise(BF16, ties)
    assert y.tolist() == [0x3F80, 0x3F82, 0x0000, 0x0002, 0x7F80, 0x7F7F, 0x7FC0, 0x8000]
    assert over.tolist() == [False, False, False, False, True, False, False, False]


def test_encode_rounds_counts_inexact_and_decode_inverts():
    bits, inexact = numerics.encode(BF16, [1.0, 0.1, -0.0, np.inf, np.nan, 3.4e38, 1e-40])
    assert bits.tolist() == [0x3F80, 0x3DCD, 0x8000, 0x7F80, 0x7FC0, 0x7F80, 0x0001]
    assert inexact == 3
    np.testing.assert_array_equal(numerics.decode(BF16, bits)[:4], [1.0, 0.10009765625, -0.0,
                                                                     np.inf])
    assert numerics.decode(BF16, [0x3F800000], raw=True).dtype == np.float32
    with pytest.raises(ValueError, match="X must hold numbers, not <U1"):
        numerics.encode(BF16, np.array(["a"]), "X")


def test_formats_are_named_serialised_and_checked():
    assert number_format("bf16") == BF16 and number_format(None) == FixedPoint()
    assert number_format(BF16.to_dict()) == BF16
    assert number_format({"width": 8, "frac_bits": 2, "acc_width": 16}) == FixedPoint(
        width=8, frac_bits=2, acc_width=16)          # a dict saved before bf16 existed
    config = MeshConfig(2, 2, fmt="bf16")
    assert config.fmt == BF16 and MeshConfig.from_dict(config.to_dict()) == config
    core = CoreParams(fmt=BF16)
    assert CoreParams.from_dict(core.to_dict()) == core
    for bad in ("fp8", {"name": "bf16", "width": 8}, 16):
        with pytest.raises(ValueError, match="number format must be one of int16, bf16, not"):
            number_format(bad)
    with pytest.raises(ValueError, match=r"W must fit in bf16 bit patterns \(0\.\.65535\), not "
                                         r"-1 \(at \[0, 1\]\)"):
        compile_gemm(config, [[0, -1]], [[1], [2]])
    with pytest.raises(ValueError, match=r"W must be bf16 bit patterns \(integers 0\.\.65535: "
                                         r"fabric\.numerics\.encode makes them from numbers\), "
                                         r"not float64 values"):
        compile_gemm(config, [[1.5]], [[2]])


# GEMMs ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("mesh", [(1, 1), (2, 3), (3, 2)])
def test_both_golden_models_follow_the_documented_order(mesh):
    config = MeshConfig(*mesh, n_feat=12, n_tok=8, n_out=12, fmt=BF16)
    rng = np.random.default_rng(sum(mesh))
    W = bf16_operands(rng, (9, 11), zeros=0.5)
    X = bf16_operands(rng, (11, 7))
    program = compile_gemm(config, W, X)
    want_y, want_raw = reference(config, program, W, X)
    y, raw = gemm_reference(config, program, X)
    np.testing.assert_array_equal(raw, want_raw)
    np.testing.assert_array_equal(y, want_y)
    with GoldenSystem(config) as wavelets:           # every wavelet through the core models
        np.testing.assert_array_equal(run_gemm(wavelets, W, X).y, want_y)
        np.testing.assert_array_equal(run_gemm(wavelets, W, X, raw=True).y, want_raw)
        fast = GoldenSystem(config, fast=True)
        assert run_gemm(wavelets, W, X).overflow == run_gemm(fast, W, X).overflow


def test_cancellation_and_overflow_are_ieee():
    config = MeshConfig(2, 1, n_feat=4, n_tok=1, n_out=4, fmt=BF16)
    one, big, large = 0x3F80, 0x7F00, 0x7E00         # 1.0, 2**127, 2**125
    neg = 0x8000
    W = np.array([[one, one | neg, 0, 0], [big, big, 0, 0], [big, big | neg, 0, 0],
                  [large, large | neg, 0, 0]])
    X = np.array([[0x4000], [0x4000], [0], [0]])     # 2.0
    with GoldenSystem(config) as system:
        result = run_gemm(system, W, X, raw=True)
        # 2 - 2 = +0; 2**128 overflows to inf; inf - inf is NaN; 2**126 - 2**126 = +0
        assert result.y[:, 0].tolist() == [0, 0x7F800000, 0x7FC00000, 0]
        assert result.overflow


def test_zeros_are_skipped_as_in_int16():
    """The same zero pattern in int16 and in bf16 (with -0 among the zeros): the same counters,
    the same modelled cycles."""
    rng = np.random.default_rng(7)
    W = bf16_operands(rng, (12, 16), zeros=0.7, special=0, wild=0)
    X = bf16_operands(rng, (16, 8), zeros=0.4, special=0, wild=0)
    W_int = np.where(W & 0x7FFF, 3, 0)
    X_int = np.where(X & 0x7FFF, -2, 0)
    figures = []
    for fmt, w, x in ((FixedPoint(), W_int, X_int), (BF16, W, X)):
        config = MeshConfig(2, 2, n_feat=8, n_tok=4, n_out=8, fmt=fmt)
        with GoldenSystem(config) as system:
            result = run_gemm(system, w, x, zeros=True)
            figures.append(({k: v.tolist() for k, v in result.counters.items()},
                            predict_cycles(result.program, x)))
    assert figures[0] == figures[1]
    assert sum(map(sum, figures[1][0]["macs_skipped_weight"])) > 0


def test_a_tiled_gemm_adds_its_blocks_in_binary32():
    from wse.fabric.tiling import run_tiled

    config = MeshConfig(2, 2, n_feat=4, n_tok=2, n_out=4, fmt=BF16)
    rng = np.random.default_rng(3)
    W = bf16_operands(rng, (5, 20), special=0, wild=0)     # 20 inputs: three input blocks
    X = bf16_operands(rng, (20, 4), special=0, wild=0)
    with GoldenSystem(config, fast=True) as system:
        tiled = run_tiled(config, W, X, lambda w, x, raw: run_gemm(system, w, x, raw=raw))
    blocks = [slice(0, 8), slice(8, 16), slice(16, 20)]
    total = None
    for b in blocks:
        program = compile_gemm(config, W[:, b], X[b], raw=True)
        part = reference(config, program, W[:, b], X[b])[1]
        total = part if total is None else numerics.accumulate(BF16, total, part)[0]
    np.testing.assert_array_equal(tiled.y, numerics.requantise(BF16, total)[0])


# The command line -----------------------------------------------------------------------------

def test_wse_gemm_in_bf16(tmp_path):
    rng = np.random.default_rng(2)
    W = rng.standard_normal((6, 10)).astype(np.float32)
    W[rng.random(W.shape) < 0.5] = 0
    X = rng.standard_normal((10, 5))
    np.save(tmp_path / "W.npy", W)
    np.save(tmp_path / "X.npy", X)
    out = tmp_path / "Y.npy"
    for raw in (False, True):
        result = CliRunner().invoke(main, ["gemm", "--format", "bf16", str(tmp_path / "W.npy"),
                                           str(tmp_path / "X.npy"), "-o", str(out), "--mesh",
                                           "2x2", *(["--raw"] if raw else [])])
        assert result.exit_code == 0, result.output
        assert ("W: 28 of 60 values are not exactly representable in bf16; rounded to nearest "
                "even") in result.stderr
        config = MeshConfig(2, 2, n_feat=32, n_tok=8, n_out=32, fmt=BF16)
        Wb, Xb = numerics.encode(BF16, W)[0], numerics.encode(BF16, X)[0]
        want = gemm_reference(config, compile_gemm(config, Wb, Xb), Xb)[1 if raw else 0]
        got = np.load(out)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, numerics.decode(BF16, want, raw=raw))
    np.save(tmp_path / "S.npy", np.array([[True]]))
    result = CliRunner().invoke(main, ["gemm", "--format", "bf16", str(tmp_path / "S.npy"),
                                       str(tmp_path / "X.npy"), "-o", str(out)])
    assert result.exit_code == 2 and "W must hold real numbers, not bool values" in result.stderr
    result = CliRunner().invoke(main, ["gemm", "--format", "fp8", str(tmp_path / "W.npy"),
                                       str(tmp_path / "X.npy"), "-o", str(out)])
    assert result.exit_code == 2 and "'fp8' is not one of 'int16', 'bf16'" in result.stderr
