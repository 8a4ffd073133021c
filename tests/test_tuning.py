"""Choosing a program by the cycle model (``fabric/tuning.py``; ``docs/mesh.md``, "Tuning"): the
output order a program takes, the packed placement, and the tuner, whose pick must compute what
the default program computes (on the wavelet-level golden model) in no more modelled cycles."""

import numpy as np
import pytest

from wse.bench.gemm import prune, random_operands
from wse.fabric import numerics
from wse.fabric.compiler import compile_gemm
from wse.fabric.config import MeshConfig, gemm_config
from wse.fabric.cycle_model import CycleModel, predict_cycles
from wse.fabric.mesh_model import MeshModel
from wse.fabric.placement import Placement
from wse.fabric.reference import gemm_reference
from wse.fabric.spans import stream_order
from wse.fabric.tuning import balanced_order, middle_last, tune_gemm
from wse.rtl.isa import CONTROL, CR_ARG
from wse.rtl.numfmt import number_format
from wse.rtl.wavelet import ControlOp, unpack

MESH_4X2 = MeshConfig(4, 2, n_feat=16, n_out=16, n_tok=8)


def sparse(rng, shape, density, scale=300):
    return rng.integers(-scale, scale, shape) * (rng.random(shape) < density)


@pytest.mark.parametrize("order, message", [
    ([0, 1, 1, 2], "order must name each of the 4 outputs once (a permutation of 0..3), not 4 "
                   "indices with repeats or outside that range"),
    ([0, 1, 2, 4], "order must name each of the 4 outputs once (a permutation of 0..3), not 4 "
                   "indices with repeats or outside that range"),
    ([0, 1, 2], "order must name each of the 4 outputs once (a permutation of 0..3), not 3 "
                "indices"),
    ([0.0, 1.0, 2.0, 3.0], "order must be a sequence of output indices, not [0.0, 1.0, 2.0, 3.0]"),
    ([[0, 1], [2, 3]], "order must be a sequence of output indices, not [[0, 1], [2, 3]]"),
])
def test_a_bad_order_is_named(order, message):
    W = np.arange(1, 13).reshape(4, 3)
    with pytest.raises(ValueError) as error:
        compile_gemm(MESH_4X2, W, np.ones((3, 4), dtype=np.int64), order=order)
    assert str(error.value) == message


def test_a_given_order_is_the_stream_order_and_computes_the_same():
    rng = np.random.default_rng(4)
    W, X = sparse(rng, (12, 10), 0.6), sparse(rng, (10, 16), 0.8)
    default = compile_gemm(MESH_4X2, W, X)
    order = rng.permutation(12)
    program = compile_gemm(MESH_4X2, W, X, order=order)
    np.testing.assert_array_equal(program.output_order, order)
    assert not np.array_equal(default.output_order, order)
    # each row's carriage returns come in that order
    cr = {int(a): o for o, a in enumerate(program.cr_args())}
    for words in program.streams.values():
        data, _, ctrl = unpack(np.array(words, dtype=np.uint64))
        fields = CONTROL.unpack(data[ctrl == 1])
        crs = CR_ARG.unpack(fields["arg"][fields["op"] == ControlOp.CR.value])["o"]
        got = [cr[int(a)] for a in crs]
        assert got == [o for o in order.tolist() if o in got] and got
    want = MeshModel(MESH_4X2).run_program(default)
    np.testing.assert_array_equal(MeshModel(MESH_4X2).run_program(program), want)
    np.testing.assert_array_equal(want, gemm_reference(MESH_4X2, default, X)[0])


def test_packed_placement_fills_the_lightest_row():
    counts = np.array([10, 9, 8, 1, 1, 1, 1, 1])
    packed = Placement.packed_counts(counts, 2)
    assert packed.kind == "packed"
    # 10 -> 0, 9 -> 1, 8 -> 1 (9 < 10), three 1s -> 0 (full at 4), the rest -> 1
    assert packed.row_of.tolist() == [0, 1, 1, 0, 0, 0, 1, 1]
    assert packed.slot_of.tolist() == [0, 0, 1, 1, 2, 3, 2, 3]
    load = np.bincount(packed.row_of, weights=counts)
    dealt = Placement.balanced_counts(counts, 2)
    assert load.max() == 19 < np.bincount(dealt.row_of, weights=counts).max() == 20


@pytest.mark.parametrize("seed", range(5))
def test_packed_placement_needs_no_more_slots_and_balances_better(seed):
    rng = np.random.default_rng(seed)
    counts = rng.poisson(6, rng.integers(5, 70))
    for rows in (2, 3, 4):
        packed = Placement.packed_counts(counts, rows)
        dealt = Placement.balanced_counts(counts, rows)
        assert packed.slots_per_row().max() == dealt.slots_per_row().max()
        for r in range(rows):       # each row's slots are 0, 1, ... with no gap
            assert sorted(packed.slot_of[packed.row_of == r]) == list(range(
                int((packed.row_of == r).sum())))
        load = np.bincount(packed.row_of, weights=counts, minlength=rows)
        assert load.max() <= np.bincount(dealt.row_of, weights=counts, minlength=rows).max()


def test_middle_last_and_balanced_order():
    assert middle_last(1) == [0]
    assert middle_last(2) == [0, 1]
    assert middle_last(4) == [0, 3, 1, 2]
    assert middle_last(5) == [0, 4, 1, 3, 2]
    costs = np.array([[4, 0, 2], [0, 4, 2]])
    # 2 keeps the rows level; then 0 and 1 spread them the same: the earlier first
    assert balanced_order(costs, [np.arange(3)]).tolist() == [2, 0, 1]
    assert balanced_order(costs, [np.array([1, 0]), np.array([2])]).tolist() == [1, 0, 2]
    owners = compile_gemm(MESH_4X2, np.eye(8, dtype=np.int64), spans=False)
    np.testing.assert_array_equal(
        owners.out_placement.row_of[stream_order(owners, owners=middle_last(4))],
        [0, 0, 3, 3, 1, 1, 2, 2])


def _kinds(rng):
    """``(name, options, W, X)``: one GEMM of each kind a program can be."""
    W, X = sparse(rng, (14, 12), 0.3), sparse(rng, (12, 16), 0.7)
    mask = rng.random((14, 16)) < 0.4
    bias = sparse(rng, (14,), 0.8)
    out = Placement(4, np.arange(14) % 4, 4 + np.arange(14) // 4)
    yield "requantised", {}, W, X
    yield "raw", {"raw": True}, W, X
    yield "zeros streamed", {"zeros": True}, W, X
    yield "masked", {"mask": mask, "raw": True}, W, X
    yield "act with a bias", {"act": True, "bias": bias, "out_placement": out,
                              "in_placement": Placement.modulo(12, 4)}, W, X
    yield "delta", {"keep": mask, "out_placement": out}, W, X


@pytest.mark.parametrize("kind", ["requantised", "raw", "zeros streamed", "masked",
                                  "act with a bias", "delta"])
def test_the_tuned_program_computes_what_the_default_does(kind, figure):
    rng = np.random.default_rng(11)
    name, options, W, X = next(k for k in _kinds(rng) if k[0] == kind)
    default = compile_gemm(MESH_4X2, W, X, **options)
    tuned = tune_gemm(MESH_4X2, W, X, **options)
    assert tuned.tuned["candidates"] > 1
    assert tuned.tuned["default_cycles"] == predict_cycles(default, X)
    assert tuned.tuned["cycles"] == predict_cycles(tuned, X) <= predict_cycles(default, X)
    for given in ("in_placement", "out_placement"):    # what the caller fixed stays fixed
        if given in options:
            assert getattr(tuned, given) == options[given]
    want = MeshModel(MESH_4X2).run_program(default)
    got = MeshModel(MESH_4X2).run_program(tuned)
    np.testing.assert_array_equal(got, want)
    figure(f"tuned {name} 14x12x16 on a 4x2 mesh: {tuned.tuned['cycles']} modelled cycles of "
           f"{tuned.tuned['candidates']} candidates, the default {tuned.tuned['default_cycles']}")


def test_a_tuned_bf16_program_is_what_the_golden_model_computes():
    """In bf16 the placement orders a row's additions: the tuned program's results are those of
    the reference of that program (they may differ from the default's in the last place)."""
    fmt = number_format("bf16")
    config = MeshConfig(4, 2, n_feat=16, n_out=16, n_tok=8, fmt=fmt)
    rng = np.random.default_rng(5)
    W = numerics.encode(fmt, sparse(rng, (14, 12), 0.4) / 64.0)[0]
    X = numerics.encode(fmt, sparse(rng, (12, 16), 0.7) / 64.0)[0]
    tuned = tune_gemm(config, W, X)
    assert tuned.in_placement.kind == "packed"
    np.testing.assert_array_equal(MeshModel(config).run_program(tuned),
                                  gemm_reference(config, tuned, X)[0])


def test_a_resident_x_keeps_its_placement_and_x_is_needed():
    """``load=False``: the cores hold ``X`` where an earlier program put it, so the tuner tries
    orders and spans but never another placement; without ``X`` it has nothing to cost."""
    rng = np.random.default_rng(3)
    W, X = sparse(rng, (12, 10), 0.3), sparse(rng, (10, 16), 0.7)
    held = Placement.balanced(W, 4)
    tuned = tune_gemm(MESH_4X2, W, X, in_placement=held, load=False)
    assert tuned.in_placement == held and not tuned.load
    # by default a load=False program places its X as compile_gemm would have loaded it
    tuned = tune_gemm(MESH_4X2, W, X, load=False)
    assert tuned.in_placement == compile_gemm(MESH_4X2, W, X).in_placement
    with pytest.raises(ValueError, match="^tune_gemm needs X: the cycle model costs each "
                                         "program on its activations$"):
        tune_gemm(MESH_4X2, W)


def test_a_fixed_order_and_spans_are_kept():
    rng = np.random.default_rng(2)
    W, X = sparse(rng, (12, 10), 0.3), sparse(rng, (10, 16), 0.7)
    order = rng.permutation(12)
    tuned = tune_gemm(MESH_4X2, W, X, order=order, spans=False)
    np.testing.assert_array_equal(tuned.output_order, order)
    assert tuned.spans is False
    assert tuned.tuned["candidates"] == 2        # the default and the packed placement


def test_the_benchs_gemm_reaches_its_utilisation_in_the_model(figure):
    """``wse bench gemm``'s default point (64x64x32 at 90 % on the 4x4 mesh): the tuner's pick
    is modelled at 0.95 of the ideal cycles or better, the default program below it (the RTL
    figure: ``tests/test_mesh_cocotb.py`` and ``docs/results.md``)."""
    W0, X = random_operands(64, 64, 32, seed=1)
    W = prune(W0, 0.9, seed=1)
    config = gemm_config((4, 4), 64, 64, 32)
    tuned = tune_gemm(config, W, X)
    ideal = tuned.ideal_cycles(X)
    model = CycleModel(tuned, X)
    assert ideal / tuned.tuned["default_cycles"] < 0.95 <= ideal / model.cycles
    figure(f"bench gemm 64x64x32 at 90 % (model): tuned {model.cycles} cycles (utilisation "
           f"{ideal / model.cycles:.3f}), default {tuned.tuned['default_cycles']} "
           f"({ideal / tuned.tuned['default_cycles']:.3f}); {tuned.in_placement.kind} inputs, "
           f"spans {tuned.spans}")
