"""The weight-gradient pass as a masked GEMM (``fabric/gradient.py``, ``docs/mesh.md``, "Masked
GEMMs"): the MASK streams, the golden models, the cycle model, and the exact gradient through
every way the host cuts it into blocks."""

import math

import numpy as np
import pytest

from wse.fabric import numerics
from wse.fabric.compiler import compile_gemm
from wse.fabric.config import MeshConfig
from wse.fabric.cycle_model import CycleModel, predict_cycles, predict_unmasked_cycles
from wse.fabric.gradient import gradient_gemm, gradient_mask, gradient_reference
from wse.fabric.reference import gemm_reference
from wse.fabric.tiling import SparseRows, run_tiled
from wse.rtl import isa
from wse.rtl.bfloat import BFloat16
from wse.rtl.wavelet import CONTROL, ControlOp, unpack
from wse.runtime import GoldenSystem

from .gemm_runs import run_gemm


def sparse(rng, shape, density, scale=300):
    a = rng.integers(-scale, scale, shape)
    a[rng.random(shape) >= density] = 0
    return a


def masks_of(words):
    """The MASK wavelets of a stream as ``(col, chunk, bits)``."""
    data, _, ctrl = (a.tolist() for a in unpack(np.array(words, dtype=np.uint64)))
    out = []
    for d, k in zip(data, ctrl):
        if k and CONTROL.unpack(d)["op"] == ControlOp.MASK.value:
            f = isa.MASK_ARG.unpack(CONTROL.unpack(d)["arg"])
            out.append((int(f["col"]), int(f["chunk"]), int(f["bits"])))
    return out


def test_a_masked_program_gates_each_column_before_an_outputs_weights():
    config = MeshConfig(2, 2, n_feat=4, n_tok=32, n_out=4, lanes=2)
    W = np.array([[3, 0, 5], [0, 0, 0], [1, 2, 0]])
    mask = np.zeros((3, 64), dtype=bool)
    mask[0, [0, 3, 40]] = True          # column 0: tokens 0, 40 (local 0, 20); column 1: local 1
    mask[1] = True                       # no weights: nothing streamed, whatever the mask
    mask[2] = True                       # every token: no MASK needed
    program = compile_gemm(config, W, n_tokens=64, mask=mask, balance=False)
    # output 0's weights are on rows 0 (features 0 and 2) and 0: row 0 gets its MASKs, row 1
    # (feature 1: no weight of output 0) none; chunk 1 of column 1 is all zero
    want = [(0, 0, 1), (0, 1, 1 << 4), (1, 0, 1 << 1), (1, 1, 0)]
    assert masks_of(program.streams[0]) == want
    assert masks_of(program.streams[1]) == []
    assert program.streamed_outputs.tolist() == [True, True, True]
    assert program.masks_per_output().tolist() == [[2, 2], [0, 0], [0, 0]]
    # the MASKs come right before the output's first weight
    assert ControlOp.MASK.value == CONTROL.unpack(int(unpack(
        np.array(program.streams[0][:1], dtype=np.uint64))[0][0]))["op"]


def test_an_output_gated_off_everywhere_streams_no_weight():
    config = MeshConfig(1, 1, n_tok=8)
    W = np.array([[1, 2], [3, 4]])
    mask = np.array([[0] * 8, [1] * 8])
    program = compile_gemm(config, W, n_tokens=8, mask=mask)
    assert program.nnz == 2 and program.streamed_outputs.tolist() == [False, True]
    assert masks_of(program.streams[0]) == []


@pytest.mark.parametrize("kwargs, message", [
    ({"mask": np.ones((3, 7), dtype=bool)}, "mask must have shape (n_out, tokens) = (3, 8)"),
    ({"mask": np.full((3, 8), 2)}, "mask must hold booleans (or 0 and 1)"),
    ({"mask": np.full((3, 8), 0.5)}, "mask must hold booleans (or 0 and 1)"),
])
def test_bad_masks_are_named(kwargs, message):
    config = MeshConfig(1, 1)
    with pytest.raises(ValueError) as info:
        compile_gemm(config, np.ones((3, 4), dtype=np.int64), n_tokens=8, **kwargs)
    assert message in str(info.value)


def test_a_mesh_a_mask_cannot_address_is_refused():
    from wse.fabric.routes import MAX_COLS
    assert isa.MASK_MAX_COLS >= MAX_COLS        # every column a mesh can have
    long = MeshConfig(1, 1, n_feat=4, n_tok=2048, n_out=4)
    with pytest.raises(ValueError, match=r"a masked GEMM needs n_tok <= 1024"):
        compile_gemm(long, np.ones((1, 1), dtype=np.int64), n_tokens=4,
                     mask=np.ones((1, 4), dtype=bool))


@pytest.mark.parametrize("seed", range(4))
def test_the_golden_masked_gemm_is_the_masked_product(seed):
    rng = np.random.default_rng(seed)
    config = MeshConfig(3, 2, n_feat=8, n_tok=8, n_out=8, lanes=2)
    W, X = sparse(rng, (10, 20), 0.4), sparse(rng, (20, 16), 0.6)
    mask = rng.random((10, 16)) < 0.3
    program = compile_gemm(config, W, X, mask=mask, raw=bool(seed % 2))
    Y, raw = gemm_reference(config, program, X)
    np.testing.assert_array_equal(raw, (W @ X) * mask)
    slow_Y, slow_raw = gemm_reference(config, program, X, fast=False)
    np.testing.assert_array_equal(slow_raw, raw)
    np.testing.assert_array_equal(slow_Y, Y)


def test_the_wavelet_level_mesh_model_agrees_with_the_reference():
    """Every core's golden model (MASKs, gates, CRs) and the vectorised reference."""
    rng = np.random.default_rng(7)
    config = MeshConfig(2, 3, n_feat=8, n_tok=32, n_out=8, lanes=2)
    W, X = sparse(rng, (9, 14), 0.5), sparse(rng, (14, 96), 0.5)
    mask = rng.random((9, 96)) < 0.2
    mask[4] = False
    with GoldenSystem(config) as slow, GoldenSystem(config, fast=True) as fast:
        for raw in (False, True):
            got = run_gemm(slow, W, X, mask=mask, raw=raw)
            want = run_gemm(fast, W, X, mask=mask, raw=raw)
            np.testing.assert_array_equal(got.y, want.y)
        # the counters: MACs issued are the nonzero products inside the mask
        issued = int(got.counters["macs_issued"].sum())
        assert issued == int(((W != 0).astype(np.int64) @ (X != 0) * mask).sum())


def test_a_saturating_masked_gemm_saturates_as_the_mesh_does():
    config = MeshConfig(2, 1, n_feat=4, n_tok=4, n_out=4)
    W = np.full((2, 8), 32767)
    X = np.full((8, 4), 32767)
    mask = np.array([[1, 0, 1, 0], [0, 0, 0, 1]], dtype=bool)
    program = compile_gemm(config, W, X, mask=mask, raw=True)
    _, raw = gemm_reference(config, program, X)
    assert (raw[mask] == config.fmt.acc_max).all() and (raw[~mask] == 0).all()


def test_the_cycle_model_counts_gated_tokens_and_masks():
    """One column, one lane: an AXPY costs the nonzero gated tokens of its slot (at least 1),
    each MASK 1, and without the mask the nonzero tokens."""
    config = MeshConfig(1, 1, n_feat=4, n_tok=16, n_out=4)
    X = np.zeros((2, 16), dtype=np.int64)
    X[0, :10] = 1                                  # feature 0: tokens 0..9 nonzero
    X[1, 8:] = 1                                   # feature 1: tokens 8..15
    W = np.array([[1, 1]])
    mask = np.zeros((1, 16), dtype=bool)
    mask[0, [0, 1, 8, 9, 15]] = True               # feature 0: 4 gated, feature 1: 3
    program = compile_gemm(config, W, X, mask=mask, balance=False)
    model = CycleModel(program, X)
    assert model.busy.tolist() == [1 + 4 + 3]      # a MASK and two AXPYs
    assert CycleModel(program, X, unmasked=True).busy.tolist() == [10 + 8]
    assert predict_cycles(program, X) < predict_unmasked_cycles(program, X)


def _golden_gradient(config, shape, rows, cols, dY, A, transposed=None, streamed=None):
    """``(dW, overflow)`` of :func:`gradient_gemm` on the fast golden mesh of ``config``;
    ``streamed`` (a list) gets the shape of each ``W`` the GEMM streams."""
    with GoldenSystem(config, fast=True) as system:
        def gemm(W, X, mask=None, totals=False):
            def block(Wb, Xb, raw, **masked):
                return run_gemm(system, Wb, Xb, raw=raw, counters=False, **masked)
            if streamed is not None:
                streamed.append(W.shape)
            tiled = run_tiled(config, W, X, block, mask=mask, totals=totals)
            return tiled.y, tiled.overflow

        dW, overflow = gradient_gemm(gemm, shape, rows, cols, dY, A, transposed=transposed)
    return dW, overflow


@pytest.mark.parametrize("transposed", [False, True], ids=["dY streamed", "A streamed"])
@pytest.mark.parametrize("shape, tokens, mesh", [
    ((12, 20), 9, (2, 2)),          # one block
    ((40, 70), 30, (2, 2)),         # tokens (the layer's inputs) in three blocks
    ((10, 16), 75, (2, 1)),         # the batch (the GEMM's features) in two blocks
    ((30, 6), 12, (2, 2)),          # more outputs than inputs
])
def test_the_gradient_on_the_mesh_is_the_exact_sum(shape, tokens, mesh, transposed):
    rng = np.random.default_rng(sum(shape) + tokens)
    config = MeshConfig(*mesh, n_feat=16, n_tok=8, n_out=8)
    n_out, n_in = shape
    dY, A = sparse(rng, (n_out, tokens), 0.5, 3000), sparse(rng, (n_in, tokens), 0.5, 3000)
    A = np.abs(A)                                   # ReLU activations
    mask = rng.random(shape) < 0.1
    rows, cols = np.nonzero(mask)
    streamed = []
    dW, overflow = _golden_gradient(config, shape, rows, cols, dY, A, transposed, streamed)
    assert streamed == [(n_in, tokens) if transposed else (n_out, tokens)]
    want, beyond = gradient_reference(config.fmt, rows, cols, dY, A)
    np.testing.assert_array_equal(dW, want)
    assert not overflow and not beyond


@pytest.mark.parametrize("shape, streams", [((10, 64), "A"), ((64, 64), "dY"), ((64, 10), "dY")])
def test_the_smaller_operand_is_loaded(shape, streams):
    """By default a layer with fewer outputs than inputs streams its activations and loads
    ``dY^T``; any other streams ``dY`` and loads ``A^T``."""
    rng = np.random.default_rng(0)
    config = MeshConfig(2, 2, n_feat=16, n_tok=32, n_out=8)
    n_out, n_in = shape
    dY, A = sparse(rng, (n_out, 8), 0.5, 3000), np.abs(sparse(rng, (n_in, 8), 0.5, 3000))
    rows, cols = np.nonzero(rng.random(shape) < 0.3)
    streamed = []
    dW, _ = _golden_gradient(config, shape, rows, cols, dY, A, streamed=streamed)
    assert streamed == [(n_in, 8) if streams == "A" else (n_out, 8)]
    np.testing.assert_array_equal(dW, gradient_reference(config.fmt, rows, cols, dY, A)[0])


def _bf16(rng, shape, density, positive=False):
    values = rng.normal(0, 1, shape) * 2.0 ** rng.integers(-20, 20, shape)
    values[rng.random(shape) >= density] = 0
    bits, _ = numerics.encode(BFloat16(), np.abs(values) if positive else values)
    return bits


@pytest.mark.parametrize("shape, tokens, mesh", [
    ((12, 20), 9, (2, 2)), ((40, 70), 30, (2, 2)), ((10, 16), 75, (2, 1))])
def test_the_bf16_gradient_on_the_mesh_is_within_the_summation_bound(shape, tokens, mesh):
    """bf16: each total is the mesh's binary32 sum of the exact products (blocks added in block
    order), so within ``(n - 1) u sum |p|`` of the exact sum for ``n`` products."""
    rng = np.random.default_rng(sum(shape) + tokens)
    config = MeshConfig(*mesh, n_feat=16, n_tok=8, n_out=8, fmt="bf16")
    n_out, n_in = shape
    dY, A = _bf16(rng, (n_out, tokens), 0.5), _bf16(rng, (n_in, tokens), 0.5, positive=True)
    rows, cols = np.nonzero(rng.random(shape) < 0.1)
    dW, overflow = _golden_gradient(config, shape, rows, cols, dY, A)
    got = numerics.as_float32(dW).astype(np.float64)
    products = (numerics.as_float32(dY, operand=True)[rows].astype(np.float64)
                * numerics.as_float32(A, operand=True)[cols])
    exact = np.array([math.fsum(p) for p in products])
    bound = (tokens - 1) * 2.0 ** -24 * np.abs(products).sum(axis=1)
    assert (np.abs(got - exact) <= bound * (1 + 2.0 ** -40) + 2.0 ** -53 * np.abs(exact)).all()
    assert not overflow and (got != exact).any()        # rounded, as binary32 sums are
    with pytest.raises(ValueError, match="gradient_reference is the fixed-point gradient"):
        gradient_reference(config.fmt, rows, cols, dY, A)


def test_a_dense_layers_gradient_needs_no_mask_and_bad_indices_are_named():
    rows, cols = np.nonzero(np.ones((3, 4), dtype=bool))
    assert gradient_mask((3, 4), rows, cols) is None
    with pytest.raises(ValueError, match="mask indices must lie in the 3x4 layer"):
        gradient_mask((3, 4), [0, 3], [0, 0])
    with pytest.raises(ValueError, match=r"needs dY \[3, T\] and X \[4, T\]"):
        gradient_gemm(None, (3, 4), rows, cols, np.zeros((3, 5)), np.zeros((4, 6)))


def test_sparse_rows_of_the_deltas_skip_zero_deltas():
    dY = np.array([[0, 2, 0], [0, 0, 0]])
    assert SparseRows.from_dense(dY).values.tolist() == [2]


def test_a_gradient_that_saturates_is_reported_by_the_worker():
    """Totals beyond 32 bits saturate in the cores' accumulators: the pass's overflow flag is
    set (the trainer counts it as ``gradient_overflows``), never a silent wrong gradient."""
    from wse.host.worker import MeshWorker

    worker = MeshWorker(MeshConfig(2, 2), "golden")
    try:
        dY = np.full((3, 8), 32767)
        A = np.full((5, 8), 32767)
        rows, cols = np.nonzero(np.eye(3, 5, dtype=bool))
        dW, figures, overflow = gradient_gemm(worker.gemm, (3, 5), rows, cols, dY, A)
        assert overflow and (dW == 2**31 - 1).all()
        assert figures.cycles > 0 and figures.dense_cycles >= figures.cycles
        small, *_, fine = gradient_gemm(worker.gemm, (3, 5), rows, cols, dY // 64, A // 64)
        assert not fine
        np.testing.assert_array_equal(small, gradient_reference(
            worker.config.fmt, rows, cols, dY // 64, A // 64)[0])
    finally:
        worker.close()


def test_a_bf16_gradient_that_overflows_is_flagged_and_refused_by_the_worker():
    """bf16: a total that reaches ``inf`` sets the pass's overflow flag; the worker refuses to
    send it on (an infinite gradient has no exact sum), naming the layer."""
    from wse.host.layer_stream import LayerStream
    from wse.host.worker import MeshWorker

    fmt = BFloat16()
    worker = MeshWorker(MeshConfig(2, 2, fmt="bf16"), "golden")
    try:
        big, _ = numerics.encode(fmt, np.full((3, 8), 2.0 ** 120))
        rows, cols = np.nonzero(np.eye(3, 5, dtype=bool))
        dW, figures, overflow = gradient_gemm(worker.gemm, (3, 5), rows, cols, big,
                                              big[:1].repeat(5, axis=0))
        assert overflow and (numerics.as_float32(dW) == np.inf).all() and figures.cycles > 0
        layer = LayerStream.from_dense("fc0", fmt, np.eye(3, 5), np.ones((3, 5), bool),
                                       np.zeros(3))
        x, _ = numerics.encode(fmt, np.full((5, 8), 2.0 ** 120))
        worker.op_forward(0, layer.fields(), True, x=x)
        with pytest.raises(ValueError, match="layer 0's gradient: 15 of 15 binary32 values are "
                                             "not finite"):
            worker.op_backward(0, layer.fields(), dy=big)
    finally:
        worker.close()
