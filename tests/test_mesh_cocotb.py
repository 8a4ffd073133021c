"""The mesh RTL under cocotb, through the System interface, against the golden mesh model.

Each test opens one simulator session (:class:`runtime.simulator.CocotbSystem`) and a
:class:`runtime.golden.GoldenSystem`, runs the same calls on both and compares every result bit for
bit: GEMM outputs (requantised and raw), memory read back, and every counter of every PE except
``stall_cycles`` (waits depend on timing). Figures (cycles, skipped MACs) are printed.
"""

import numpy as np
import pytest

from wse.fabric.compiler import compile_gemm
from wse.fabric.config import MeshConfig
from wse.fabric.cycle_model import predict_cycles
from wse.fabric.placement import Placement
from wse.fabric.reference import gemm_reference
from wse.fabric.spans import stream_order
from wse.rtl.core_params import COUNTERS
from wse.rtl.wavelet import unpack
from wse.runtime import CocotbSystem, GoldenSystem, SimulationError

from .cocotb_checks import SIMS, SIMS_VERILATOR_SLOW
from .gemm_runs import run_gemm

TIMED = {"stall_cycles"}


def random_gemm(rng, n_out, n_in, tokens, sparsity, act_sparsity=0.0, scale=300):
    W = rng.integers(-scale, scale, (n_out, n_in))
    W[rng.random(W.shape) < sparsity] = 0
    X = rng.integers(-scale, scale, (n_in, tokens))
    X[rng.random(X.shape) < act_sparsity] = 0
    return W, X


def check_gemm(rtl, golden, W, X, figure=print, **kwargs):
    """The same GEMM on both systems: equal results and counters. Returns the RTL result."""
    got = run_gemm(rtl, W, X, **kwargs)
    want = run_gemm(golden, W, X, **kwargs)
    reference = gemm_reference(golden.config, want.program, X)[1 if kwargs.get("raw") else 0]
    np.testing.assert_array_equal(want.y, reference)
    np.testing.assert_array_equal(got.y, want.y)
    for name in COUNTERS:
        if name not in TIMED:
            np.testing.assert_array_equal(got.counters[name], want.counters[name],
                                          err_msg=f"counter {name}")
    assert got.error == want.error and got.overflow == want.overflow
    ideal = got.program.ideal_cycles(X)
    figure(f"mesh {rtl.config.rows}x{rtl.config.cols} {rtl.backend}: "
           f"{W.shape[0]}x{W.shape[1]}x{X.shape[1]}, {got.program.nnz} nonzeros"
           f"{' raw' if kwargs.get('raw') else ''}{' zeros' if kwargs.get('zeros') else ''}: "
           f"{got.cycles} cycles (ideal {ideal}, utilisation {ideal / got.cycles:.2f}), "
           f"MACs issued {got.counters['macs_issued'].sum()}, skipped "
           f"{got.counters['macs_skipped_act'].sum()} (activation) "
           f"{got.counters['macs_skipped_weight'].sum()} (weight), bit-exact")
    return got


def sessions(config, sim, **kwargs):
    return CocotbSystem(config, sim=sim, **kwargs), GoldenSystem(config)


#: The non-square mesh most tests share (one build per simulator).
MESH_2X3 = MeshConfig(2, 3, n_feat=16, n_tok=4, n_out=16)


@pytest.mark.parametrize("sim", SIMS)
def test_memcpy_round_trip_and_counters(sim):
    rtl, golden = sessions(MESH_2X3, sim)
    with rtl, golden:
        rng = np.random.default_rng(5)
        x = rng.integers(-32768, 32768, (2, 2, 16))
        for system in (rtl, golden):
            system.memcpy_h2d("X", x, 1, 0, 2, 2)
        for system in (rtl, golden):
            np.testing.assert_array_equal(system.memcpy_d2h("X", 1, 0, 2, 2, 16), x)
            assert not system.memcpy_d2h("X", 0, 0, 1, 2, 16).any()
        got, want = rtl.counters(), golden.counters()
        for name in COUNTERS:
            if name not in TIMED:
                np.testing.assert_array_equal(got[name], want[name], err_msg=name)


@pytest.mark.parametrize("sim", SIMS)
def test_random_gemms_on_a_non_square_mesh(sim, figure):
    """2x3 mesh: sparsities 0..99 %, zero activations, raw totals, zeros streamed, saturation;
    after a reset of one clock edge, the shortest ``docs/mesh.md`` allows."""
    rtl, golden = sessions(MESH_2X3, sim, reset_cycles=1)
    rng = np.random.default_rng(1)
    with rtl, golden:
        for sparsity, act, shape in [(0.0, 0.0, (8, 12, 12)), (0.5, 0.3, (20, 24, 10)),
                                     (0.9, 0.0, (32, 32, 12)), (0.99, 0.5, (32, 32, 12))]:
            W, X = random_gemm(rng, *shape, sparsity, act)
            check_gemm(rtl, golden, W, X, figure)
        W, X = random_gemm(rng, 12, 20, 9, 0.6)
        check_gemm(rtl, golden, W, X, figure, raw=True)
        check_gemm(rtl, golden, W, X, figure, zeros=True, balance=False)
        W, X = random_gemm(rng, 6, 8, 12, 0.0, scale=32768)        # saturates
        assert check_gemm(rtl, golden, W, X, figure).overflow
        # the tuner's pick: packed inputs, spans and outputs not grouped by owner
        W, X = random_gemm(np.random.default_rng(2), 32, 32, 12, 0.8, 0.2)
        got = check_gemm(rtl, golden, W, X, figure, tune=True)
        program = got.program
        assert program.in_placement.kind == "packed" and program.spans
        assert not np.array_equal(program.output_order, stream_order(program))
        default = check_gemm(rtl, golden, W, X, figure)
        figure(f"mesh 2x3 {sim}: the tuned program {got.cycles} cycles (model "
               f"{program.tuned['cycles']}), the default {default.cycles} (model "
               f"{program.tuned['default_cycles']})")


@pytest.mark.parametrize("sim", SIMS_VERILATOR_SLOW)
def test_rows_sharing_reply_colors(sim, figure):
    """3x2 mesh with two reply colors, as a mesh of more than 18 rows has them: rows 0 and 2
    share one, so their replies merge on the way south, READs go in two exchanges and raw
    results are owned by rows 0 and 1 only; every result and counter as the golden model's."""
    config = MeshConfig(3, 2, n_feat=8, n_tok=4, n_out=8, reply_colors=2)
    rtl, golden = sessions(config, sim)
    rng = np.random.default_rng(4)
    with rtl, golden:
        assert config.plan.out(0) == config.plan.out(2) and config.plan.read_groups() == [
            [0, 1], [2]]
        W, X = random_gemm(rng, 20, 22, 8, 0.6, 0.2)
        check_gemm(rtl, golden, W, X, figure)
        got = check_gemm(rtl, golden, W, X, figure, raw=True)
        assert set(got.program.out_placement.row_of.tolist()) == {0, 1}
        x = rng.integers(-32768, 32768, (3, 2, 8))
        for system in (rtl, golden):
            system.memcpy_h2d("X", x, 0, 0, 2, 3)
            np.testing.assert_array_equal(system.memcpy_d2h("X", 0, 0, 2, 3, 8), x)


@pytest.mark.parametrize("sim", SIMS)
def test_one_tile_mesh(sim, figure):
    config = MeshConfig(1, 1, n_feat=8, n_tok=8, n_out=8, lanes=2)
    rtl, golden = sessions(config, sim)
    rng = np.random.default_rng(2)
    with rtl, golden:
        for sparsity in (0.0, 0.7):
            W, X = random_gemm(rng, 8, 8, 8, sparsity, 0.25)
            want = check_gemm(rtl, golden, W, X, figure)
            check_gemm(rtl, golden, W, X, figure, raw=True)
        # without counters (what training asks for): no counter READs, the same Y and cycles
        got = run_gemm(rtl, W, X, counters=False)
        np.testing.assert_array_equal(got.y, want.y)
        assert got.counters == {} and got.cycles == want.cycles and not got.error


@pytest.mark.parametrize("sim", SIMS)
def test_a_foreign_color_is_flagged_and_a_stuck_mesh_is_named(sim):
    from wse.fabric import pe_model
    from wse.rtl.wavelet import pack

    rtl, golden = sessions(MESH_2X3, sim, watchdog=500)
    with golden:
        bad = int(pack(123, MESH_2X3.plan.out(0), 0))      # a reply color entering an intake
        assert golden.exchange({0: [bad]}).error
        assert rtl.exchange({0: [bad]}).error
        # a CR into row 0 only: row 0 waits for row 1's psums, which never come
        with pytest.raises(SimulationError, match="watchdog: the mesh was busy"):
            rtl.exchange({0: [pe_model.cr(MESH_2X3.core(0, 0), 1)]})
        rtl.close(check=False)
    assert not rtl.result.passed       # the testbench failed the run too


@pytest.mark.slow      # a cocotb build of the 4x4 of its own, over a minute; the compiled 4x4
#                        runs in `wse bench gemm` and the tuned programs on the 2x3 above
def test_a_4x4_mesh_runs_a_sparse_64x64_gemm(figure):
    config = MeshConfig(4, 4)
    rtl, golden = sessions(config, "verilator")
    rng = np.random.default_rng(3)
    with rtl, golden:
        W, X = random_gemm(rng, 64, 64, 32, 0.9)
        got = check_gemm(rtl, golden, W, X, figure)
        model = predict_cycles(got.program, X)
        figure(f"mesh 4x4 cycle model: {model} cycles against {got.cycles} measured "
               f"({model / got.cycles:.2f})")
        # within a few per cent of the RTL (docs/results.md); not a timing assertion: both are
        # cycle counts of a deterministic simulation
        assert abs(model - got.cycles) <= 0.05 * got.cycles
        tuned = check_gemm(rtl, golden, W, X, figure, tune=True)
        model = tuned.program.tuned["cycles"]
        figure(f"mesh 4x4, the tuned program: {tuned.cycles} cycles (model {model}, the "
               f"default {got.cycles})")
        assert abs(model - tuned.cycles) <= 0.05 * tuned.cycles
        assert tuned.cycles < got.cycles


def strip_masks(streams):
    """``streams`` without their MASK wavelets (a mesh that ignored its gates would compute
    this)."""
    from wse.rtl.wavelet import CONTROL, ControlOp, unpack

    def keep(word):
        data, _, ctrl = (int(a[0]) for a in unpack(np.array([word], dtype=np.uint64)))
        return not (ctrl and CONTROL.unpack(data)["op"] == ControlOp.MASK.value)
    return {r: [w for w in words if keep(w)] for r, words in streams.items()}


@pytest.mark.parametrize("sim", SIMS)
def test_masked_gemms_the_gradient_pass(sim, figure):
    """2x3 mesh: masked GEMMs (the weight-gradient pass, ``docs/mesh.md``), raw and requantised,
    outputs gated off everywhere, every counter as the golden model's, the cycle model within a
    few per cent; and the same program with its MASKs taken out gives other results on the RTL,
    so the comparison sees the gates."""
    rtl, golden = sessions(MESH_2X3, sim)
    rng = np.random.default_rng(13)
    with rtl, golden:
        for density, raw in ((0.1, True), (0.3, False), (0.1, True)):
            W, X = random_gemm(rng, 20, 24, 12, 0.5, 0.5)
            mask = rng.random((20, 12)) < density
            mask[3] = False
            got = check_gemm(rtl, golden, W, X, figure, raw=raw, mask=mask)
            model = predict_cycles(got.program, X)
            figure(f"  masked ({density:.0%} of the pairs): {got.cycles} cycles, cycle model "
                   f"{model}, {got.program.masks_per_output().sum()} MASKs")
            assert abs(model - got.cycles) <= 0.1 * got.cycles
        # the mutation: the RTL without the MASKs computes the unmasked product
        program = got.program
        rtl.exchange(program.load_streams(X))
        outlets = rtl.launch(strip_masks(program.streams)).outlets
        # ungated, each owner sends the totals of its column's every real token, for each
        # output it owns in stream order (an output gated off everywhere was never streamed)
        cfg, order = program.config, program.output_order
        owner = program.out_placement.row_of
        exact = W @ X
        for c in range(cfg.cols):
            got_words = unpack(np.array(outlets.get(c, []), dtype=np.uint64))
            for r in range(cfg.rows):
                mine = [o for o in order if owner[o] == r and program.streamed_outputs[o]]
                want = [int(v) & 0xFFFFFFFF for o in mine for v in exact[o, c::cfg.cols]]
                assert got_words[0][got_words[1] == cfg.plan.out(r)].tolist() == want
        assert (exact[program.streamed_outputs] != got.y[program.streamed_outputs]).any()


def _resident_step(system, program, check):
    """Run ``program`` on ``system`` (its tokens set; its ``X`` loaded unless resident) and
    compare its result with the reference of what it was compiled from."""
    result = system.gemm(program)
    want = gemm_reference(program.config, program, program.X)
    np.testing.assert_array_equal(result.y, want[1] if program.raw else want[0])
    check(result)
    return result


@pytest.mark.parametrize("sim", SIMS)
def test_a_network_stays_on_the_mesh(sim, figure):
    """2x3 mesh, a 9-12-5 network with its activations and deltas in the cores' X
    (``docs/mesh.md``, "Resident layers"): layer 1 loads the batch and writes its ReLU into
    slots 5-10 by CR_ACT with its bias on the ones slot; after a GEMM of other tokens above
    them (slots 14-15), layer 2 reads them there (no load, its tokens set again) and sends raw
    totals; the delta pass loads the loss's deltas into slots 11-13 and writes ``W2^T dY``
    over the activations where they are nonzero (CR_DELTA, its owner rows gated by MASKs).
    Then the same delta pass transposed (``docs/mesh.md``, "The transposed backward pass"):
    ``dY^T`` streamed over ``W2`` loaded into slots 11-13, ``dZ^T`` written by CR_DELTA into
    slots 0-4 (every active token: 0 where the ReLU cut) and read in place by the masked
    weight-gradient GEMM of layer 1, the batch streamed as its weights. Every result, counter
    and word of every core's X as the golden model's; the cycle model within a few per cent."""
    rtl, golden = sessions(MESH_2X3, sim)
    rng = np.random.default_rng(21)
    cfg = MESH_2X3
    W1, X = random_gemm(rng, 12, 9, 10, 0.4, 0.2)
    W2, _ = random_gemm(rng, 5, 12, 10, 0.4)
    b1, b2 = rng.integers(-4000, 4000, 12), rng.integers(-4000, 4000, 5)
    dY = rng.integers(-300, 300, (5, 10))
    W4, X4 = random_gemm(rng, 6, 4, 12, 0.3)
    M1 = rng.random((12, 9)) < 0.4                      # layer 1's mask
    i12, i5, i4, i10 = np.arange(12), np.arange(5), np.arange(4), np.arange(10)
    mid = Placement(cfg.rows, i12 % 2, 5 + i12 // 2)
    with rtl, golden:
        results = {}

        def same(name):
            def check(result):
                if name in results:
                    other = results[name]
                    np.testing.assert_array_equal(result.y, other.y)
                    for counter in COUNTERS:
                        if counter not in TIMED:
                            np.testing.assert_array_equal(result.counters[counter],
                                                          other.counters[counter], counter)
                    assert not result.error and not other.error
                results[name] = result
            return check

        for system in (golden, rtl):
            first = compile_gemm(cfg, W1, X, in_placement=Placement.modulo(9, cfg.rows),
                                 out_placement=mid, act=True, bias=b1)
            A = _resident_step(system, first, same("layer 1")).y
            # a GEMM of 12 tokens in between, above the resident slots (as a weight-gradient
            # pass is): the next resident program sets its own tokens again
            other = compile_gemm(cfg, W4, X4, raw=True,
                                 in_placement=Placement(cfg.rows, i4 % 2, 14 + i4 // 2))
            _resident_step(system, other, same("between"))
            second = compile_gemm(cfg, W2, A, in_placement=mid, raw=True, bias=b2, load=False)
            _resident_step(system, second, same("layer 2"))
            back = compile_gemm(cfg, W2.T, dY, in_placement=Placement(cfg.rows, i5 % 2,
                                                                       11 + i5 // 2),
                                out_placement=mid, keep=A != 0)
            _resident_step(system, back, same("delta"))
            tback = compile_gemm(cfg, dY.T, W2, in_placement=Placement(cfg.rows, i5 % 2,
                                                                      11 + i5 // 2),
                                 out_placement=Placement(cfg.rows, i10 % 2, i10 // 2),
                                 keep=(A != 0).T)
            dZT = _resident_step(system, tback, same("transposed delta")).y
            grad = compile_gemm(cfg, X, dZT, mask=M1.T, raw=True, load=False,
                                in_placement=Placement(cfg.rows, i10 % 2, i10 // 2))
            _resident_step(system, grad, same("gradient"))
        np.testing.assert_array_equal(results["transposed delta"].y.T, results["delta"].y)
        assert (results["gradient"].y != 0).any()
        assert (A == 0).any() and (A != 0).any()
        x_rtl, x_golden = (s.memcpy_d2h("X", 0, 0, cfg.cols, cfg.rows, cfg.n_feat * cfg.n_tok)
                           for s in (rtl, golden))
        np.testing.assert_array_equal(x_rtl, x_golden)
        for name, program in (("layer 1", first), ("layer 2", second), ("delta", back),
                              ("transposed delta", tback), ("gradient", grad)):
            got, model = results[name].cycles, predict_cycles(program)
            figure(f"resident {name} on the 2x3 {sim} mesh: {got} cycles (cycle model {model}),"
                   f" {results[name].load_cycles} to set its tokens"
                   f"{' and load' if program.load else ''}, bit-exact")
            assert abs(model - got) <= 0.1 * got
