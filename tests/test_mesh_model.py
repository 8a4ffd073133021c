"""The mesh's golden model (``fabric/mesh_model.py``): whole GEMMs through the wavelet-level
model against the fast reference and plain integer arithmetic, saturation order, raw results,
and the protocol errors (stuck carriage returns, dropped colors, configuration)."""

import numpy as np
import pytest

from wse.fabric import numerics
from wse.fabric.compiler import compile_gemm
from wse.fabric.config import MeshConfig
from wse.fabric.mesh_model import MeshModel
from wse.fabric.pe_model import COUNTER_BASE, cr, read, select, weight
from wse.fabric.placement import Placement
from wse.fabric.reference import gemm_reference
from wse.rtl.numfmt import FixedPoint
from wse.rtl.wavelet import CONTROL, ControlOp, pack

from .gemm_runs import run_gemm

ACC_MAX, ACC_MIN = 2**31 - 1, -2**31


def sparse(rng, shape, density, lo, hi):
    a = rng.integers(lo, hi, shape, endpoint=True)
    a[rng.random(shape) >= density] = 0
    return a


def gemm_case(rows, cols, density, seed, *, lo=-300, hi=300, tokens=None, raw=False, **cfg):
    """A random GEMM that fills most of a ``rows x cols`` mesh of small cores."""
    rng = np.random.default_rng(seed)
    config = MeshConfig(rows=rows, cols=cols, **{"n_feat": 5, "n_tok": 4, "n_out": 3, **cfg})
    n_out = rows * config.n_out - rng.integers(0, 2)
    n_in = rows * config.n_feat - rng.integers(0, 3)
    tokens = tokens or config.max_tokens - rng.integers(0, min(3, config.max_tokens))
    W = sparse(rng, (n_out, n_in), density, lo, hi)
    X = sparse(rng, (n_in, tokens), 0.8, lo, hi)       # some zero activations
    return config, W, X, compile_gemm(config, W, X, raw=raw)


def check_counts(model, prog, X):
    """MACs the cores did: the useful ones, and issued + skipped = n_tok per weight."""
    counters = model.counters()
    cfg = prog.config
    assert sum(k["macs_issued"] for k in counters.values()) == prog.useful_macs(X)
    for r in range(cfg.rows):
        done = sum(counters[(r, c)][name] for c in range(cfg.cols) for name in
                   ("macs_issued", "macs_skipped_weight", "macs_skipped_act"))
        assert done == prog.weights_per_row[r] * cfg.n_tok * cfg.cols
    assert all(v == (0, 0) for v in model.pending_psums().values())


# Whole GEMMs --------------------------------------------------------------------------------------

SHAPES = [(1, 1), (2, 3), (4, 4), (3, 1)]


@pytest.mark.parametrize("density", [1.0, 0.5, 0.1, 0.01])
@pytest.mark.parametrize("rows, cols", SHAPES)
def test_random_gemm_matches_the_reference_and_integer_arithmetic(rows, cols, density):
    config, W, X, prog = gemm_case(rows, cols, density, seed=rows * 100 + cols * 10 +
                                   int(density * 100))
    model = MeshModel(config)
    Y = model.run_program(prog)
    Y_ref, raw_ref = gemm_reference(config, prog, X)
    assert Y.dtype == np.int64 and Y.shape == (W.shape[0], X.shape[1])
    assert (Y == Y_ref).all()
    # small operands: nothing saturates, so it is plain integer arithmetic
    exact = W @ X
    assert (raw_ref == exact).all()
    assert (Y == numerics.requantise(config.fmt, exact)[0]).all()
    assert not model.error and not model.overflow
    check_counts(model, prog, X)


@pytest.mark.parametrize("rows, cols, density", [(1, 1, 0.5), (2, 3, 0.9), (4, 4, 0.5),
                                                 (3, 1, 1.0)])
def test_raw_results_stream_out_as_the_reference_totals(rows, cols, density):
    config, W, X, prog = gemm_case(rows, cols, density, seed=7 + rows, raw=True,
                                   lo=-32768, hi=32767)
    model = MeshModel(config)
    model.exchange(prog.load_streams())
    outlets = model.exchange(prog.streams)
    # a total per output and real token: the engines visit the active tokens alone
    assert sum(map(len, outlets.values())) == W.shape[0] * X.shape[1]
    totals = prog.decode_raw(outlets)
    _, raw_ref = gemm_reference(config, prog, X)
    assert (totals == raw_ref).all()
    assert all(not core.y.any() for core in model.cores.values())     # Y untouched


NARROW = FixedPoint(width=8, frac_bits=4, acc_width=16)


@pytest.mark.parametrize("rows, cols, seed, fmt, lanes", [
    (1, 1, 0, FixedPoint(), 1), (2, 3, 1, FixedPoint(), 2), (4, 4, 2, FixedPoint(), 4),
    (3, 1, 3, FixedPoint(), 1), (3, 2, 4, NARROW, 2), (1, 2, 5, NARROW, 1),
])
def test_saturating_gemms_agree_with_the_reference(rows, cols, seed, fmt, lanes):
    top = fmt.operand_max
    config, W, X, _ = gemm_case(rows, cols, 0.9, seed, lo=fmt.operand_min, hi=top, n_feat=8,
                                fmt=fmt, lanes=lanes)
    W[0], X[:, 0] = top, top                           # output 0, token 0: 6+ x top**2
    prog = compile_gemm(config, W, X)
    model = MeshModel(config)
    Y = model.run_program(prog)
    Y_ref, raw_ref = gemm_reference(config, prog, X)
    assert (Y == Y_ref).all() and model.overflow
    assert (raw_ref != W @ X).any()                    # it did saturate somewhere
    assert (raw_ref >= ACC_MIN).all() and (raw_ref <= ACC_MAX).all()
    raw_prog = compile_gemm(config, W, X, raw=True, in_placement=prog.in_placement)
    assert (MeshModel(config).run_program(raw_prog) == raw_ref).all()


def test_saturation_follows_the_stream_and_the_psum_chain():
    """Row 1 (the owner) of a 3-row mesh: row 0 saturates high on its own, row 2 brings a large
    negative psum; the order of the saturating additions decides the result."""
    config = MeshConfig(rows=3, cols=1, n_feat=2, n_tok=1, n_out=1,
                        fmt=FixedPoint(width=16, frac_bits=0, acc_width=32))
    big = 32767
    # inputs 0, 1 on row 0 (both +big*big), 2 on row 1 (0), 3, 4 on row 2 (-big*big each)
    inp = Placement(3, [0, 0, 1, 2, 2], [0, 1, 0, 0, 1])
    W = np.array([[big, big, 1, -big, -big], [big] * 5, [big] * 5])
    X = np.array([[big], [big], [0], [big], [big]])
    out = Placement(3, [1, 0, 2], [0, 0, 0])
    prog = compile_gemm(config, W, X, in_placement=inp, out_placement=out)
    model = MeshModel(config)
    Y = model.run_program(prog)
    Y_ref, raw_ref = gemm_reference(config, prog, X)
    # row 0: 2 big^2 = 2147352578 fits; row 2: -2147352578 fits; owner: 0 + n + s = 0
    assert raw_ref[0, 0] == 0 and (W @ X)[0, 0] == 0
    # output 1 (owner row 0): 5 big^2 in int64, but every row saturates on its own
    assert raw_ref[1, 0] == ACC_MAX and (Y == Y_ref).all()
    assert Y[1, 0] == 32767 and model.overflow


def test_psum_order_is_from_n_then_from_s():
    """The owner row (1 of 3) adds its northern psum, saturating, before its southern one:
    sat(sat(a1 + a0) + a2) is one less than a0 + a1 + a2 here (south first would be exact)."""
    config = MeshConfig(rows=3, cols=1, n_feat=1, n_tok=1, n_out=1,
                        fmt=FixedPoint(width=16, frac_bits=0, acc_width=32))
    W = np.array([[-32768, -32768, -32768]])
    X = np.array([[-32768], [-32768], [32767]])
    a0 = a1 = 2**30
    a2 = -32768 * 32767
    prog = compile_gemm(config, W, X, in_placement=Placement.modulo(3, 3),
                        out_placement=Placement(3, [1], [0]), raw=True)
    totals = MeshModel(config).run_program(prog)
    _, raw_ref = gemm_reference(config, prog, X)
    assert totals[0, 0] == raw_ref[0, 0] == ACC_MAX + a2 == a0 + a1 + a2 - 1


def test_fast_and_step_by_step_references_agree():
    for seed, (lo, hi) in enumerate([(-300, 300), (-32768, 32767), (-20000, 20000)]):
        config, W, X, prog = gemm_case(4, 2, 0.7, seed, lo=lo, hi=hi, n_feat=9)
        fast = gemm_reference(config, prog, X)
        slow = gemm_reference(config, prog, X, fast=False)
        assert (fast[0] == slow[0]).all() and (fast[1] == slow[1]).all()


def test_chained_layers_with_the_next_layers_placement():
    rng = np.random.default_rng(11)
    config = MeshConfig(rows=3, cols=2, n_feat=6, n_tok=4, n_out=6,
                        fmt=FixedPoint(width=16, frac_bits=4, acc_width=32))
    W1 = sparse(rng, (15, 12), 0.5, -40, 40)
    W2 = sparse(rng, (9, 15), 0.5, -40, 40)
    X = sparse(rng, (12, 7), 0.8, -40, 40)
    second_in = Placement.balanced(W2, 3)
    p1 = compile_gemm(config, W1, X, out_placement=second_in)
    model = MeshModel(config)
    H = model.run_program(p1)
    assert (H == gemm_reference(config, p1, X)[0]).all()
    # the results already lie where layer 2 wants its inputs: core (r, c) Y slots == X slots
    p2 = compile_gemm(config, W2, H, in_placement=second_in)
    for (r, c), block in p2.x_blocks().items():
        slots = block.shape[0]
        assert (model.cores[(r, c)].y[:slots] == block).all()
    assert (model.run_program(p2) == gemm_reference(config, p2, H)[0]).all()


@pytest.mark.parametrize("rows, cols", [(16, 16), (32, 32)])     # 32x32: about 6 s
def test_large_meshes_compute_bit_exact_gemms(rows, cols):
    """A mesh larger than the reply colors (18): rows share them, READs go in groups, raw
    results are owned by the middle rows; both bit-exact against numpy."""
    config, W, X, prog = gemm_case(rows, cols, 0.3, seed=rows, n_feat=2, n_tok=2, n_out=2)
    Y = MeshModel(config).run_program(prog)
    assert (Y == numerics.requantise(config.fmt, W @ X)[0]).all()
    raw = compile_gemm(config, W, X, raw=True)
    assert set(raw.out_placement.row_of.tolist()) == set(config.plan.raw_rows())
    model = MeshModel(config)
    model.exchange(raw.load_streams())
    assert (raw.decode_raw(model.exchange(raw.streams)) == W @ X).all()
    assert not model.error and len(prog.read_streams()) == -(-rows // 18)


def test_the_golden_system_reads_a_mesh_taller_than_its_reply_colors_in_groups():
    """``System`` on 20 rows (18 reply colors): ``Y``, counters and memory come back through
    one READ exchange per group, bit-exact."""
    from wse.runtime import GoldenSystem

    config, W, X, _ = gemm_case(20, 2, 0.4, seed=3, n_feat=2, n_tok=2, n_out=2)
    with GoldenSystem(config) as system:
        for raw in (False, True):
            result = run_gemm(system, W, X, raw=raw)
            want = W @ X if raw else numerics.requantise(config.fmt, W @ X)[0]
            assert (result.y == want).all() and not result.error
        assert (result.counters["macs_issued"].sum() == result.program.useful_macs(X))
        x = np.arange(20 * 2 * 4).reshape(20, 2, 4) - 80
        system.memcpy_h2d("X", x, 0, 0, 2, 20)
        assert (system.memcpy_d2h("X", 0, 0, 2, 20, 4) == x).all()


@pytest.mark.parametrize("raw", [False, True])
def test_rows_sharing_reply_colors_give_exact_results(raw):
    config, W, X, prog = gemm_case(5, 2, 0.5, seed=11, raw=raw, reply_colors=2)
    model = MeshModel(config)
    if raw:
        model.exchange(prog.load_streams())
        got, want = prog.decode_raw(model.exchange(prog.streams)), W @ X
    else:
        got, want = model.run_program(prog), gemm_reference(config, prog, X)[0]
        assert len(prog.read_streams()) == 3
    assert (got == want).all() and not model.error


def test_two_rows_replying_on_one_color_in_one_exchange_is_an_error():
    config = MeshConfig(rows=3, cols=1, n_feat=1, n_tok=2, n_out=1, reply_colors=2)
    model = MeshModel(config)
    reads = {r: [select(config.core(r, 0)), read(config.core(r, 0), 0, 2)] for r in (0, 2)}
    with pytest.raises(ValueError, match=r"^rows 0 and 2 replied in the same exchange on the same "
                                         r"color 6 \(outlet 0\): their words would mix"):
        model.exchange(reads)


# Exchanges ----------------------------------------------------------------------------------------

def test_state_persists_across_exchanges_and_reads_come_back_on_the_row_color():
    config, W, X, prog = gemm_case(2, 2, 0.5, seed=5)
    model = MeshModel(config)
    assert model.exchange(prog.load_streams()) == {0: [], 1: []}
    assert model.exchange(prog.streams) == {0: [], 1: []}
    p = config.core(1, 1)
    issued = model.counters()[(1, 1)]["macs_issued"]
    outlets = model.exchange({1: [select(p), read(p, COUNTER_BASE + 1, 1)]})
    assert outlets == {0: [], 1: [int(pack(issued, config.plan.out(1)))]}
    replies = [model.exchange(streams) for streams in prog.read_streams()]
    assert (prog.decode_y(prog.read_blocks(replies)) == gemm_reference(config, prog, X)[0]).all()
    # the core keeps its selection across exchanges: column 1 still takes row 1's commands
    assert model.cores[(1, 1)].selected == 1
    assert model.exchange({1: [read(p, COUNTER_BASE + 1, 1)]})[1] == outlets[1]
    assert set(model.counters()) == set(config.tiles)


def test_a_missing_carriage_return_leaves_the_mesh_stuck():
    config = MeshConfig(rows=2, cols=2, n_feat=1, n_tok=4, n_out=2)
    prog = compile_gemm(config, [[1, 2], [3, 4]], np.ones((2, 8), dtype=int))
    cr0 = cr(config.core(1, 0), 0)
    assert prog.streams[1] == [weight(config.core(1, 0), 2, 0), cr0,
                               weight(config.core(1, 0), 4, 0), cr(config.core(1, 0), 1)]
    model = MeshModel(config)
    model.exchange(prog.load_streams())
    # row 1 goes on to CR 1 (which it owns) and waits for row 0, which waits for CR 0's psums
    with pytest.raises(RuntimeError) as info:
        model.exchange({0: prog.streams[0], 1: [w for w in prog.streams[1] if w != cr0]})
    message = str(info.value)
    assert message.startswith("the mesh is stuck (a protocol bug in the streams")
    for c in range(2):
        assert (f"core (0,{c}) waits at command 1 of 4 (CR 0, owner row 0) for 4 psums from "
                f"the south (has 0)") in message
        assert (f"core (1,{c}) waits at command 2 of 3 (CR 1, owner row 1) for 4 psums from "
                f"the north (has 0)") in message


def test_a_row_without_the_owners_psums_waits_for_the_south():
    config = MeshConfig(rows=2, cols=1, n_feat=1, n_tok=4, n_out=1)
    prog = compile_gemm(config, [[1, 2]])
    model = MeshModel(config)
    with pytest.raises(RuntimeError, match=r"core \(0,0\) waits at command 1 of 2 \(CR 0, "
                                           r"owner row 0\) for 4 psums from the south \(has 0\)"):
        model.exchange({0: prog.streams[0], 1: prog.streams[1][:-1]})


def test_foreign_colors_at_an_intake_are_dropped_and_counted():
    config, W, X, prog = gemm_case(2, 3, 0.5, seed=9)
    model = MeshModel(config)
    model.exchange(prog.load_streams())
    streams = {r: list(s) for r, s in prog.streams.items()}
    foreign = [config.plan.down(0), config.plan.out(0), config.plan.n_colors, 30]
    streams[1][3:3] = [int(pack(7, color)) for color in foreign]
    model.exchange(streams)
    assert model.drops[(1, 0)] == 4 and sum(model.drops.values()) == 4
    assert model.error
    assert not any(core.error for core in model.cores.values())
    Y = prog.decode_y(prog.read_blocks([model.exchange(s) for s in prog.read_streams()]))
    assert (Y == gemm_reference(config, prog, X)[0]).all()


def test_a_dropped_carriage_return_takes_no_psums():
    config = MeshConfig(rows=2, cols=1, n_feat=1, n_tok=2, n_out=1)
    p0, p1 = config.core(0, 0), config.core(1, 0)
    model = MeshModel(config)
    # o = 2: owner row 0, slot 1 >= n_out: row 0 drops it; row 1 still sends its psums north
    model.exchange({0: [weight(p0, 1, 0), cr(p0, 2)], 1: [cr(p1, 2)]})
    assert model.cores[(0, 0)].error and model.error
    assert model.pending_psums()[(0, 0)] == (0, 2)


def test_configuration_and_teardown_are_not_modelled():
    config = MeshConfig(rows=2, cols=2)
    model = MeshModel(config)
    with pytest.raises(NotImplementedError, match=r"configuration wavelets \(color 31\) at the "
                                                  r"intake of row 1"):
        model.exchange({1: [int(pack(0, 31))]})
    teardown = int(pack(CONTROL.pack(op=ControlOp.TEARDOWN.value, arg=0), 0, 1))
    with pytest.raises(NotImplementedError, match=r"TEARDOWN on color 0"):
        model.exchange({0: [teardown]})
    assert not model.error


def test_exchange_rejects_malformed_input():
    model = MeshModel(MeshConfig(rows=2, cols=2))
    with pytest.raises(ValueError, match=r"streams has no row 2"):
        model.exchange({2: []})
    with pytest.raises(ValueError, match=r"wavelets must be 38-bit integers, not 274877906944"):
        model.exchange({0: [1 << 38]})
    with pytest.raises(ValueError, match=r"streams must be a dict"):
        model.exchange([[]])
    with pytest.raises(ValueError, match=r"config must be a MeshConfig"):
        MeshModel("4x4")


def test_reference_checks_its_arguments():
    config, W, X, prog = gemm_case(2, 2, 0.5, seed=1)
    with pytest.raises(ValueError, match="another config"):
        gemm_reference(MeshConfig(rows=2, cols=3), prog, X)
    with pytest.raises(ValueError, match=r"X must have shape"):
        gemm_reference(config, prog, X[:, :1])
    with pytest.raises(ValueError, match="must be a GemmProgram"):
        gemm_reference(config, None, X)
    with pytest.raises(ValueError, match="compiled for this mesh"):
        MeshModel(MeshConfig(rows=2, cols=3)).run_program(prog)
