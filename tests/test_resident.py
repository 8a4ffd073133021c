"""Resident layers (``docs/mesh.md``, "Resident layers"): a layer's output written into the cores'
``X`` by CR_ACT, with its bias added on the ones slot and its ReLU on the mesh, read there by the
next layer without a load; the golden wavelet model, the fast reference and the cycle model
against each other, the compiler's checks, the training sizing and the worker's forward pass."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from wse.fabric import numerics
from wse.fabric.compiler import compile_gemm
from wse.fabric.config import MeshConfig, train_config
from wse.fabric.cycle_model import predict_cycles, predict_io_cycles, predict_load_cycles
from wse.fabric.mesh_model import MeshModel
from wse.fabric.placement import Placement
from wse.fabric.reference import gemm_reference
from wse.fabric.tiling import SparseRows
from wse.host.cli import main
from wse.host.worker import MeshWorker
from wse.rtl.isa import CONTROL, ONES_SLOT, WEIGHT
from wse.rtl.numfmt import number_format
from wse.rtl.wavelet import ControlOp, unpack


def operands(rng, fmt, shape, scale, density=0.5):
    v = rng.integers(-scale, scale, shape) * (rng.random(shape) < density)
    return numerics.encode(fmt, v / 64.0)[0] if fmt.is_float else v


def region(rows, n, first):
    i = np.arange(n)
    return Placement(rows, i % rows, first + i // rows)


def chain(fmt_name, seed=1, n_feat=16):
    """A 9 -> 12 -> 7 network on a 2x3 mesh: the hidden layer resident at slots 8 and up."""
    rng = np.random.default_rng(seed)
    fmt = number_format(fmt_name)
    cfg = MeshConfig(2, 3, n_feat=n_feat, n_out=8, n_tok=4, fmt=fmt)
    X = operands(rng, fmt, (9, 10), 300)
    W1, b1 = operands(rng, fmt, (12, 9), 200), operands(rng, fmt, (12,), 300, 0.8)
    W2, b2 = operands(rng, fmt, (7, 12), 200), operands(rng, fmt, (7,), 300, 0.8)
    return cfg, X, (W1, b1), (W2, b2)


@pytest.mark.parametrize("fmt", ["int16", "bf16"])
def test_a_layer_stays_on_the_mesh_for_the_next_one(fmt, figure):
    """The hidden layer's activations go from CR_ACT into X and leave once, as written; the
    next layer reads them in place (no load exchange). The wavelet-level model, which holds
    every core's memory, agrees with the reference computed from the activations given."""
    cfg, X, (W1, b1), (W2, b2) = chain(fmt)
    mid = region(cfg.rows, 12, 8)
    model = MeshModel(cfg)
    first = compile_gemm(cfg, W1, X, in_placement=Placement.modulo(9, cfg.rows),
                         out_placement=mid, act=True, bias=b1)
    A = model.run_program(first)
    want, _ = gemm_reference(cfg, first, X)
    np.testing.assert_array_equal(A, want)
    assert (A != 0).any() and (A == 0).any()            # the ReLU cut some, not all
    negative = (A & 0x8000) != 0 if cfg.fmt.is_float else A < 0
    assert not negative.any()
    second = compile_gemm(cfg, W2, A, in_placement=mid, raw=True, bias=b2, load=False)
    for words in second.load_streams().values():       # SELECT and TOKENS for each column
        ops = CONTROL.unpack(unpack(np.array(words, dtype=np.uint64))[0])["op"].tolist()
        assert ops == [ControlOp.SELECT.value, ControlOp.TOKENS.value] * cfg.cols
    model.exchange(second.load_streams())
    totals = second.decode_raw(model.exchange(second.streams))
    np.testing.assert_array_equal(totals, gemm_reference(cfg, second, A)[1])
    assert not model.error
    # the cores hold the activations where the placement says
    for t in range(X.shape[1]):
        for i in range(12):
            core = model.cores[(i % cfg.rows, t % cfg.cols)]
            assert core.x[8 + i // cfg.rows, t // cfg.cols] == A[i, t]
    figure(f"resident 9-12-7 on a 2x3 mesh ({fmt}): layer 1 {predict_cycles(first)} + "
           f"{predict_io_cycles(first)} io cycles, layer 2 {predict_cycles(second)} + "
           f"{predict_io_cycles(second)} io cycles (its tokens set, no load, no read)")


def test_the_bias_is_one_more_weight_in_the_owner_row_and_the_crs_are_cr_act():
    cfg, X, (W1, b1), _ = chain("int16")
    b1 = b1.copy()
    b1[3] = 0                                           # a zero bias is not streamed
    mid = region(cfg.rows, 12, 8)
    program = compile_gemm(cfg, W1, X, out_placement=mid, act=True, bias=b1)
    for r, words in program.streams.items():
        data, color, ctrl = unpack(np.array(words, dtype=np.uint64))
        ops = CONTROL.unpack(data[ctrl == 1])["op"]
        assert set(ops.tolist()) == {ControlOp.CR_ACT.value}
        slots = WEIGHT.unpack(data[ctrl == 0])["slot"]
        owned = np.flatnonzero((mid.row_of == r) & (b1 != 0))
        assert np.count_nonzero(slots == ONES_SLOT) == owned.size
        # each ones-slot weight is the last word before a CR
        ones = np.flatnonzero((ctrl == 0) & (WEIGHT.unpack(data)["slot"] == ONES_SLOT))
        assert (ctrl[ones + 1] == 1).all()
    assert program.nnz == np.count_nonzero(W1) + np.count_nonzero(b1)


def test_the_cycle_model_counts_no_edge_transfer_of_a_resident_layer_and_the_bias_costs():
    cfg, X, (W1, b1), _ = chain("int16")
    mid = region(cfg.rows, 12, 8)
    plain = compile_gemm(cfg, W1, X, out_placement=mid, act=True)
    biased = compile_gemm(cfg, W1, X, out_placement=mid, act=True, bias=b1)
    resident = compile_gemm(cfg, W1, X, out_placement=mid, act=True, load=False)
    assert predict_io_cycles(plain) == predict_load_cycles(plain) > 0     # no read: it leaves
    # SELECT and TOKENS for each column enter a row's intake, a hop every 2 cycles, and the last
    # core takes its TOKENS
    assert predict_io_cycles(resident) == 2 * cfg.cols + 2 * cfg.cols + 2
    assert predict_cycles(biased) > predict_cycles(plain)


@pytest.mark.parametrize("kwargs, message", [
    ({"act": True, "raw": True}, r"at most one of raw \(CR_OUT\), act"),
    ({"act": True, "keep": np.ones((12, 10), dtype=bool)}, "at most one of"),
    ({"keep": np.ones((12, 9), dtype=bool)}, r"keep must have shape \(n_out, tokens\)"),
    ({"act": True, "out_placement": region(2, 12, 0)}, "would overwrite inputs: row 0 holds "
                                                        "input and output features at slot 0"),
    ({"act": True, "out_placement": region(2, 12, 12)}, "n_feat"),
    ({"bias": np.ones(12, dtype=int), "mask": np.ones((12, 10), dtype=bool)}, "no bias"),
    ({"bias": np.ones(11, dtype=int)}, r"bias must have shape \(n_out,\) = \(12,\)"),
    ({"bias": np.full(12, 40000)}, "bias must fit in the operand range of int16"),
    ({"keep": np.ones((12, 10), dtype=bool), "mask": np.ones((12, 10), dtype=bool)},
     r"a CR_DELTA program \(keep\) is gated by keep: it takes no mask"),
])
def test_a_bad_resident_program_is_refused_naming_the_problem(kwargs, message):
    cfg, X, (W1, _), _ = chain("int16")
    with pytest.raises(ValueError, match=message):
        compile_gemm(cfg, W1, X, in_placement=Placement.modulo(9, cfg.rows), **kwargs)


def test_a_resident_layer_needs_the_activations_the_cores_hold():
    cfg, _, (W1, _), _ = chain("int16")
    with pytest.raises(ValueError, match="load=False.* needs the X the cores hold"):
        compile_gemm(cfg, W1, load=False)


def test_the_sizing_keeps_every_layer_on_the_mesh_or_says_why_not():
    """A region for each layer's inputs (layer 2's over the batch), the loss's deltas (10 over
    4 rows) and the gradient pass's features (32 tokens over 4 rows); the gradient pass's
    tokens halve to make room (512 inputs over 4 columns would be 128)."""
    sizing = train_config((4, 4), (64, 512, 512, 10), 32)
    assert sizing.layout == {"inputs": [0, 128, 0], "deltas": 256, "gradient": 259}
    assert sizing.why_not == "" and sizing.config.n_feat == 267
    assert sizing.config.n_tok == 64 and 267 * 64 <= 0x8000
    wide = train_config((2, 2), (64, 4096, 4096, 10), 32)
    assert wide.layout == {} and "need 4117 slots a core (2048 + 2048 + 5 + 16)" in (
        wide.why_not)
    tall = train_config((20, 1), (64, 64, 10), 8)
    assert tall.layout == {} and "share 18 reply colors" in tall.why_not


def test_wse_train_says_when_the_activations_cannot_stay():
    result = CliRunner().invoke(main, ["train", "--mesh", "20x1", "--steps", "1", "--batch",
                                       "8", "--json"])
    assert result.exit_code == 0, result.output
    assert "note: activations go through the edges between layers: the 20 rows share" in (
        result.output)
    report = json.loads(result.output.splitlines()[-1])
    assert report["resident_layers"] is False and "reply colors" in report["resident_why_not"]


@pytest.mark.parametrize("fmt", ["int16", "bf16"])
def test_the_workers_resident_forward_pass_is_relu_of_the_biased_total(fmt):
    """Layer by layer, ``relu(requantise(W @ A + b * one))``, one rounding of the biased total,
    as numpy computes it from the weights; the logits are the requantised totals."""
    rng = np.random.default_rng(3)
    cfg = train_config((2, 2), (9, 12, 7), 6, fmt=number_format(fmt))
    worker = MeshWorker(cfg.config)
    layers = [(operands(rng, worker.config.fmt, (12, 9), 200),
               operands(rng, worker.config.fmt, (12,), 300, 0.8)),
              (operands(rng, worker.config.fmt, (7, 12), 200),
               operands(rng, worker.config.fmt, (7,), 300, 0.8))]
    A = operands(rng, worker.config.fmt, (9, 6), 300)
    f = worker.config.fmt
    for j, (W, b) in enumerate(layers):
        last = j == len(layers) - 1
        Y, figures, _ = worker.resident_layer(j, SparseRows.from_dense(W), b, A, cfg.layout,
                                              last)
        total = _totals(f, W, A, b)
        want, _ = numerics.requantise(f, total)
        if not last:
            want = numerics.relu(f, want)
        np.testing.assert_array_equal(Y, want)
        # only the batch goes in; later layers send their SELECTs and TOKENS alone
        tokens_only = 4 * worker.config.cols + 2
        assert figures.io_cycles == tokens_only if j else figures.io_cycles > tokens_only
        A = Y


def _totals(fmt, W, A, b):
    """``W @ A + b * one`` as the mesh adds it for a one-row mesh's owner, the sums exact (no
    term reaches the accumulator's limits here: int16) or, in bf16, in float64 rounded once
    (the test's sums are exact in binary32 too: few terms of few bits)."""
    if not fmt.is_float:
        return W @ A + b[:, None] * numerics.one(fmt)
    w = numerics.as_float32(W, operand=True).astype(np.float64)
    a = numerics.as_float32(A, operand=True).astype(np.float64)
    bias = numerics.as_float32(b, operand=True).astype(np.float64)
    return numerics.from_float32((w @ a + bias[:, None]).astype(np.float32))


@pytest.mark.parametrize("fmt", ["int16", "bf16"])
def test_the_delta_pass_writes_over_the_activations_where_they_are_nonzero(fmt):
    """CR_DELTA: ``W^T @ dY`` written over the layer's activations, kept where they were
    nonzero (the ReLU's derivative) and 0 elsewhere, as the wavelet model's memory holds it and
    as the reference computes it from ``keep``; the next delta pass reads it in place."""
    cfg, X, (W1, b1), (W2, _) = chain(fmt, n_feat=18)
    rng = np.random.default_rng(5)
    mid = region(cfg.rows, 12, 8)
    model = MeshModel(cfg)
    A = model.run_program(compile_gemm(cfg, W1, X, in_placement=Placement.modulo(9, cfg.rows),
                                       out_placement=mid, act=True, bias=b1))
    dY = operands(rng, cfg.fmt, (7, 10), 300, 0.7)
    back = compile_gemm(cfg, W2.T, dY, in_placement=region(cfg.rows, 7, 14), out_placement=mid,
                        keep=A != 0)
    dZ = model.run_program(back)
    want, _ = gemm_reference(cfg, back, dY)
    np.testing.assert_array_equal(dZ, want)
    assert (dZ[A == 0] == 0).all() and (dZ[A != 0] != 0).any()
    for t in range(10):
        for i in range(12):
            assert model.cores[(i % cfg.rows, t % cfg.cols)].x[8 + i // cfg.rows,
                                                               t // cfg.cols] == dZ[i, t]
    # and the next one reads it where it is
    nxt = compile_gemm(cfg, W1.T, dZ, in_placement=mid, out_placement=Placement.modulo(9, 2),
                       keep=X != 0, load=False)
    model.exchange(nxt.load_streams())
    got = nxt.decode_raw(model.exchange(nxt.streams))
    np.testing.assert_array_equal(got, gemm_reference(cfg, nxt, dZ)[0])
    assert not model.error


@pytest.mark.parametrize("fmt", ["int16", "bf16"])
def test_a_resident_backward_pass_gives_the_gradients_of_the_edge_one(fmt):
    """From the same forward pass, the backward pass with the deltas on the mesh (CR_DELTA over
    the activations, the gradient pass's features above them) and the one through the edges
    (the host masks the deltas by the ReLU) give the same gradients and deltas, layer by
    layer; the resident one moves fewer words through the edges."""
    from wse.host.layer_stream import LayerStream

    rng = np.random.default_rng(7)
    number = number_format(fmt)
    sizing = train_config((2, 2), (9, 12, 8, 5), 6, fmt=number)
    streams = [LayerStream.from_dense(f"fc{j}", number, rng.normal(0, 0.5, (m, n)),
                                      rng.random((m, n)) < 0.6, rng.normal(0, 0.1, m)).fields()
               for j, (n, m) in enumerate(((9, 12), (12, 8), (8, 5)))]
    x = operands(rng, number, (9, 6), 300)
    resident, edge = MeshWorker(sizing.config), MeshWorker(sizing.config)
    for j, stream in enumerate(streams):
        resident.op_forward(j, stream, j == 2, x=x if j == 0 else None, layout=sizing.layout)
    edge.inputs, edge.active = dict(resident.inputs), dict(resident.active)
    dy = operands(rng, number, (5, 6), 300, 0.9)
    for j in reversed(range(3)):
        last = dy if j == 2 else None
        on = resident.op_backward(j, streams[j], last, layout=sizing.layout)
        off = edge.op_backward(j, streams[j], last)
        np.testing.assert_array_equal(on["dW"], off["dW"])
        np.testing.assert_array_equal(on["db"], off["db"])
        if j:
            np.testing.assert_array_equal(resident.delta, edge.delta)
            assert on["io_cycles"]["delta"] < off["io_cycles"]["delta"]
    assert resident.delta is None and edge.delta is None


@pytest.mark.parametrize("transposed", [True, False], ids=["transposed", "usual"])
def test_a_deep_network_keeps_every_layers_activations_for_its_delta_pass(monkeypatch,
                                                                           transposed):
    """Four layers on the wavelet-level golden model, whose cores keep their memory between
    GEMMs as the RTL's do: the usual backward pass finds each layer's activations where the
    forward pass left them (layer 3's inputs do not go over layer 1's), the transposed one
    each layer's ``dZ^T`` where the delta pass above wrote it; either way a step ends with
    the weights of the fast reference, which computes every GEMM from the host's copies, and
    both ways with the same weights."""
    import wse.runtime
    from wse.fabric import config as config_module
    from wse.host.train import Trainer, TrainSettings
    from wse.runtime import GoldenSystem

    def run(scheme):
        monkeypatch.setattr(config_module, "transposed_backward", lambda *args: scheme)
        with Trainer(TrainSettings(steps=1, hidden=(48, 40, 24))) as trainer:
            assert trainer.sizing.layout["inputs"] == [0, 16, 0, 28]   # 16, 12, 10, 6 slots
            assert trainer.sizing.layout.get("transposed", False) == scheme
            trainer.step()
            return trainer.report()["weights_digest"]
    fast = run(transposed)
    with monkeypatch.context() as patch:
        patch.setattr(wse.runtime, "open_system",
                      lambda backend, config, **options: GoldenSystem(config))
        assert run(transposed) == fast
    assert run(not transposed) == fast


def test_the_backward_pass_runs_transposed_where_it_loads_fewer_words():
    """64-64-10 with a shard of 32 loads 960 words transposed (the logits' ``dY^T`` and the
    64x10 ``W``) against 2,688 (the loss's deltas, then the smaller of ``A^T`` and ``dY^T`` for
    each gradient pass): ``weights`` where ``deltas`` was. 64-512-512-10: the 512x512 ``W``
    would be 262,144 words: the usual one. A network that narrows (64-8-16-10, a shard of 8)
    loads less the usual way; one whose ``W`` region would leave no room for the activations
    (64-64-256-10, a shard of 512) keeps them resident the usual way."""
    from wse.fabric.config import transposed_backward

    assert transposed_backward((64, 64, 10), 32, 64)
    assert not transposed_backward((64, 512, 512, 10), 32, 512)
    assert not transposed_backward((64, 8, 16, 10), 8, 64)
    assert not transposed_backward((64, 10), 32, 64)             # one layer: no delta pass
    assert not transposed_backward((64, 128, 10), 32, 64)        # a W wider than a row's tokens
    assert transposed_backward((128, 64, 10), 32, 64)            # the batch's width is not one
    small = train_config((4, 4), (64, 64, 10), 32)
    assert small.layout == {"inputs": [0, 16], "weights": 32, "gradient": 35,
                            "transposed": True}
    assert "transposed" not in train_config((4, 4), (64, 512, 512, 10), 32).layout
    crowded = train_config((4, 4), (64, 64, 256, 10), 512)
    assert crowded.layout and "transposed" not in crowded.layout
