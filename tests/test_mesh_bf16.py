"""The bf16 mesh RTL under cocotb, on Verilator and Icarus, against the golden mesh model bit for
bit (results as bit patterns, NaNs canonical), with every counter equal; and the zero-skip the
same as int16's: one zero pattern, the same cycles in both formats."""

import numpy as np
import pytest

from wse.fabric import numerics
from wse.fabric.config import MeshConfig
from wse.fabric.reference import gemm_reference
from wse.rtl.numfmt import BFloat16, FixedPoint

from .test_bf16 import bf16_operands, reference
from .test_mesh_cocotb import check_gemm, sessions

#: The 2x3 mesh of tests/test_mesh_cocotb.py in bf16.
MESH_2X3_BF16 = MeshConfig(2, 3, n_feat=16, n_tok=4, n_out=16, fmt=BFloat16())


#: The GEMMs of the exponent-range test: (sparsity, shape, fraction of arbitrary patterns).
GEMMS = [(0.0, (8, 12, 12), 0.0), (0.5, (20, 24, 10), 0.1), (0.9, (32, 32, 12), 0.3),
         (0.99, (32, 32, 12), 0.5)]

#: Icarus takes the two smaller GEMMs in the default suite (the rest of the test, raw, masked,
#: overflow and memory, in full) and all of them under `make regress`: the suite's time.
RUNS = [pytest.param("verilator", GEMMS, id="verilator"),
        pytest.param("icarus", GEMMS[:2], id="icarus"),
        pytest.param("icarus", GEMMS[2:], marks=pytest.mark.slow, id="icarus-large")]


@pytest.mark.parametrize("sim, gemms", RUNS)
def test_bf16_gemms_over_the_whole_exponent_range(sim, gemms, figure):
    """Sparsities 0..99 %, ±0 operands, subnormals, extremes, ±inf and NaN, raw binary32 totals,
    zeros streamed, a masked GEMM and X read back: the RTL equals the golden model's bits, and
    the golden model equals ``docs/numerics.md``'s scalar definition."""
    rtl, golden = sessions(MESH_2X3_BF16, sim)
    rng = np.random.default_rng(11)
    with rtl, golden:
        for sparsity, shape, wild in gemms:
            W = bf16_operands(rng, shape[:2], zeros=sparsity, wild=wild)
            X = bf16_operands(rng, shape[1:], wild=wild)
            got = check_gemm(rtl, golden, W, X, figure)
            np.testing.assert_array_equal(
                got.y, reference(MESH_2X3_BF16, got.program, W, X)[0])
        W, X = bf16_operands(rng, (12, 20), zeros=0.6), bf16_operands(rng, (20, 9))
        check_gemm(rtl, golden, W, X, figure, raw=True)
        check_gemm(rtl, golden, W, X, figure, zeros=True, balance=False)
        mask = rng.random((12, 9)) < 0.4
        got = check_gemm(rtl, golden, W, X, figure, raw=True, mask=mask)
        assert (got.y[~mask] == 0).all()
        big = np.full((4, 6), 0x7F00)                 # 2**127: products overflow to inf
        assert check_gemm(rtl, golden, big, np.full((6, 3), 0x4000), figure).overflow
        x = bf16_operands(rng, (2, 2, 16), zeros=0.2)
        for system in (rtl, golden):
            system.memcpy_h2d("X", x, 1, 0, 2, 2)
            np.testing.assert_array_equal(system.memcpy_d2h("X", 1, 0, 2, 2, 16), x)


@pytest.mark.parametrize("sim", ["verilator", pytest.param("icarus", marks=pytest.mark.slow)])
def test_bf16_skips_the_zeros_int16_skips_in_the_same_cycles(sim, figure):
    """One zero pattern (``-0`` among the zeros) in both formats on the same mesh shape: the
    same compute cycles and the same counters (the zero-skip does not depend on the format)."""
    rng = np.random.default_rng(12)
    W = bf16_operands(rng, (24, 32), zeros=0.8, special=0, wild=0)
    X = bf16_operands(rng, (32, 12), zeros=0.3, special=0, wild=0)
    runs = {}
    for fmt, w, x in ((FixedPoint(), np.where(W & 0x7FFF, 5, 0), np.where(X & 0x7FFF, -3, 0)),
                      (BFloat16(), W, X)):
        config = MeshConfig(2, 3, n_feat=16, n_tok=4, n_out=16, fmt=fmt)
        rtl, golden = sessions(config, sim)
        with rtl, golden:
            runs[fmt.name] = check_gemm(rtl, golden, w, x, figure)
    fixed, bf16 = runs["int16"], runs["bf16"]
    assert fixed.cycles == bf16.cycles
    for name, values in fixed.counters.items():
        np.testing.assert_array_equal(values, bf16.counters[name], err_msg=name)
    np.testing.assert_array_equal(
        bf16.y, gemm_reference(bf16.program.config, bf16.program, X)[0])
    figure(f"zero-skip {sim}: {bf16.cycles} cycles in bf16 and in int16, "
           f"{int(bf16.counters['macs_skipped_weight'].sum())} zero weights and "
           f"{int(bf16.counters['macs_skipped_act'].sum())} zero activations skipped alike; "
           f"bf16 result {np.count_nonzero(np.isfinite(numerics.decode(BFloat16(), bf16.y)))} "
           f"finite values")
