"""GEMMs bigger than the mesh, cut into blocks: the tiled golden path against plain numpy, and
the wavelet-level golden System against the fast one."""

import numpy as np
import pytest

from wse.fabric import numerics
from wse.fabric.config import MeshConfig
from wse.fabric.gradient import gradient_reference
from wse.fabric.tiling import combine, plan_tiles, run_tiled
from wse.runtime import GoldenSystem

from .gemm_runs import run_gemm

SMALL = MeshConfig(2, 2, n_feat=4, n_tok=2, n_out=4)


def _numpy_gemm(config, W, X):
    """``W @ X`` as the tiled path defines it when nothing saturates: exact, then requantised."""
    Y, _ = numerics.requantise(config.fmt, W @ X)
    return Y


def test_plan_cuts_what_does_not_fit():
    plan = plan_tiles(SMALL, n_out=9, n_in=8, tokens=5)        # inputs fit 2 * 4
    assert not plan.raw
    assert [(s.start, s.stop) for s in plan.outputs] == [(0, 8), (8, 9)]
    assert [(s.start, s.stop) for s in plan.tokens] == [(0, 4), (4, 5)]
    plan = plan_tiles(SMALL, n_out=9, n_in=20, tokens=4)
    assert plan.raw and len(plan.inputs) == 3 and len(plan.outputs) == 1
    with pytest.raises(ValueError, match="n_in must be a positive integer, not 0"):
        plan_tiles(SMALL, 1, 0, 1)


@pytest.mark.parametrize("shape", [(3, 5, 3), (9, 8, 5), (7, 20, 6), (30, 17, 9)])
def test_tiled_golden_matches_numpy(shape):
    n_out, n_in, tokens = shape
    rng = np.random.default_rng(sum(shape))
    W = rng.integers(-300, 300, (n_out, n_in))
    W[rng.random(W.shape) < 0.5] = 0
    X = rng.integers(-300, 300, (n_in, tokens))
    system = GoldenSystem(SMALL, fast=True)
    result = run_tiled(SMALL, W, X, lambda w, x, raw: run_gemm(system, w, x, raw=raw))
    assert np.array_equal(result.y, _numpy_gemm(SMALL, W, X))
    assert len(result.results) == plan_tiles(SMALL, n_out, n_in, tokens).blocks


def test_fast_golden_is_the_wavelet_golden():
    rng = np.random.default_rng(7)
    W = rng.integers(-500, 500, (6, 20))
    W[rng.random(W.shape) < 0.6] = 0
    X = rng.integers(-500, 500, (20, 5))
    slow, fast = GoldenSystem(SMALL), GoldenSystem(SMALL, fast=True)
    a = run_tiled(SMALL, W, X, lambda w, x, raw: run_gemm(slow, w, x, raw=raw))
    b = run_tiled(SMALL, W, X, lambda w, x, raw: run_gemm(fast, w, x, raw=raw))
    assert np.array_equal(a.y, b.y)
    assert all(np.array_equal(r.y, q.y) for r, q in zip(a.results, b.results))


def test_combine_saturates_then_requantises():
    fmt = SMALL.fmt
    Y, overflow = combine(fmt, [np.array([fmt.acc_max, 256]), np.array([5, 256])])
    assert overflow and Y.tolist() == [fmt.operand_max, 2]


def test_gradient_pass_against_brute_force():
    fmt = SMALL.fmt
    rng = np.random.default_rng(3)
    dY, X = rng.integers(-2000, 2000, (5, 7)), rng.integers(-2000, 2000, (9, 7))
    rows, cols = np.nonzero(rng.random((5, 9)) < 0.4)
    got, beyond = gradient_reference(fmt, rows, cols, dY, X)
    want = [sum(int(dY[o, t]) * int(X[i, t]) for t in range(7)) for o, i in zip(rows, cols)]
    assert got.tolist() == want and beyond == 0
    big = np.full((1, 4), 32767)
    got, beyond = gradient_reference(fmt, [0], [0], big, big)
    assert got.tolist() == [4 * 32767 ** 2] and beyond == 1     # exact, only counted


def test_gradient_totals_split_over_tokens_add_up_exactly():
    """What makes 1, 2 or 4 systems train to the same bits: shards' totals sum to the whole's,
    even beyond the 32-bit range."""
    fmt = SMALL.fmt
    rng = np.random.default_rng(4)
    dY, X = rng.integers(-32768, 32767, (3, 10)), rng.integers(-32768, 32767, (4, 10))
    rows, cols = np.nonzero(np.ones((3, 4), dtype=bool))
    whole, beyond = gradient_reference(fmt, rows, cols, dY, X)
    parts = [gradient_reference(fmt, rows, cols, dY[:, s], X[:, s])[0]
             for s in (slice(0, 3), slice(3, 7), slice(7, 10))]
    assert beyond > 0 and np.array_equal(sum(parts), whole)


# -- compressed rows ------------------------------------------------------------------------------

def _sparse_matrix(rng, shape, density=0.4):
    W = rng.integers(-300, 300, shape)
    W[rng.random(shape) > density] = 0
    return W


def test_sparse_rows_cut_blocks_and_transpose_without_a_dense_matrix():
    from wse.fabric.tiling import SparseRows

    rng = np.random.default_rng(11)
    W = _sparse_matrix(rng, (9, 13))
    rows = SparseRows.from_dense(W)
    assert np.array_equal(rows.dense(), W)
    assert np.array_equal(rows.transpose().dense(), W.T)
    for r, c in [(slice(0, 9), slice(0, 13)), (slice(2, 7), slice(4, 11)), (slice(8, 9),
                                                                            slice(0, 1))]:
        block = rows.block(r, c)
        assert np.array_equal(block.dense(), W[r, c]) and block.shape == W[r, c].shape
    with_zeros = SparseRows((2, 3), np.array([0, 2, 3]), np.array([0, 2, 1]),
                            np.array([5, 0, -1]))
    assert np.array_equal(with_zeros.nonzero().indices, [0, 1])
    assert np.array_equal(with_zeros.nonzero().dense(), with_zeros.dense())


@pytest.mark.parametrize("shape", [(9, 8, 5), (7, 20, 6)])
def test_tiled_compressed_rows_are_the_tiled_dense_matrix(shape):
    from wse.fabric.tiling import SparseRows

    n_out, n_in, tokens = shape
    rng = np.random.default_rng(sum(shape))
    W = _sparse_matrix(rng, (n_out, n_in))
    X = rng.integers(-300, 300, (n_in, tokens))
    system = GoldenSystem(SMALL, fast=True)
    seen = []

    def sparse_block(Wb, Xb, raw):
        assert isinstance(Wb, SparseRows)
        seen.append(Wb.shape)
        return run_gemm(system, Wb.dense(), Xb, raw=raw)

    dense = run_tiled(SMALL, W, X, lambda Wb, Xb, raw: run_gemm(system, Wb, Xb, raw=raw))
    sparse = run_tiled(SMALL, SparseRows.from_dense(W), X, sparse_block)
    assert np.array_equal(sparse.y, dense.y) and sparse.overflow == dense.overflow
    assert len(seen) == plan_tiles(SMALL, n_out, n_in, tokens).blocks
