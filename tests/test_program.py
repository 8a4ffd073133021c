"""The GEMM program (``fabric/program.py``) against ``docs/mesh.md``, "Layout of Y = W @ X":
placements, the validation messages, the streams wavelet by wavelet, load / read / decode."""

import numpy as np
import pytest

from wse.fabric import loads as loads_mod
from wse.fabric.compiler import compile_gemm, compile_gemm_csr
from wse.fabric.config import MeshConfig
from wse.fabric.pe_model import CoreModel
from wse.fabric.placement import Placement
from wse.fabric.program import MAX_READ, GemmProgram
from wse.fabric.tiling import SparseRows
from wse.rtl.core_params import Y_BASE
from wse.rtl.isa import CR_ARG
from wse.rtl.numfmt import FixedPoint
from wse.rtl.wavelet import CONTROL, ControlOp, pack, unpack


def sparse(rng, shape, density, lo=-300, hi=300):
    a = rng.integers(lo, hi, shape)
    a[rng.random(shape) >= density] = 0
    return a


def decoded(words):
    """``[(kind, ...)]`` of packed wavelets: ``("w", color, value, slot)`` for data,
    ``(op name, color, arg)`` for control."""
    data, color, ctrl = (a.tolist() for a in unpack(np.array(words, dtype=np.uint64)))
    out = []
    for d, col, k in zip(data, color, ctrl):
        if k:
            f = CONTROL.unpack(d)
            out.append((ControlOp(int(f["op"])).name, col, int(f["arg"])))
        else:
            value = d & 0xFFFF
            out.append(("w", col, value - (value >> 15 << 16), d >> 16))
    return out


# Placement ----------------------------------------------------------------------------------------

def test_modulo_deals_features_round_robin():
    p = Placement.modulo(7, 3)
    assert p.row_of.tolist() == [0, 1, 2, 0, 1, 2, 0]
    assert p.slot_of.tolist() == [0, 0, 0, 1, 1, 1, 2]
    assert len(p) == 7 and p.rows == 3 and p.kind == "modulo"
    assert p.slots_per_row().tolist() == [3, 2, 2]
    assert p.features_of(1).tolist() == [1, 4]
    assert Placement.modulo(0, 2).slots_per_row().tolist() == [0, 0]


def test_balanced_deals_the_most_nonzero_features_first_ties_by_index():
    W = np.array([[1, 0, 2, 3, 0],
                  [1, 0, 0, 3, 4],
                  [1, 5, 0, 3, 0]])
    # counts 3, 1, 1, 3, 1 -> order 0, 3, 1, 2, 4
    p = Placement.balanced(W, 2)
    assert p.kind == "balanced"
    assert p.row_of.tolist() == [0, 0, 1, 1, 0]      # k = 0, 2, 3, 1, 4
    assert p.slot_of.tolist() == [0, 1, 1, 0, 2]
    assert p.slots_per_row().tolist() == [3, 2]


@pytest.mark.parametrize("rows", [1, 3, 4, 7])
def test_balanced_rows_are_within_one_features_count(rows):
    rng = np.random.default_rng(rows)
    W = sparse(rng, (40, 50), 0.3)
    W[:, 5] = 1                       # one dense feature
    p = Placement.balanced(W, rows)
    counts = np.count_nonzero(W, axis=0)
    per_row = np.bincount(p.row_of, weights=counts, minlength=rows)
    assert per_row.max() - per_row.min() <= counts.max()
    assert p.row_of[5] == 0 and p.slot_of[5] == 0
    # slots are dense: every row's slots are 0 .. features - 1
    for r in range(rows):
        assert sorted(p.slot_of[p.row_of == r].tolist()) == list(range((p.row_of == r).sum()))


def test_given_placement_and_equality():
    p = Placement(2, [1, 0, 1], [0, 4, 2])
    assert p.slots_per_row().tolist() == [5, 3] and p.kind == "given"
    assert p == Placement(2, np.array([1, 0, 1]), [0, 4, 2]) and p != Placement.modulo(3, 2)
    with pytest.raises(ValueError):
        p.row_of[0] = 0               # read-only
    with pytest.raises(AttributeError, match="immutable"):
        p.rows = 3


@pytest.mark.parametrize("args, message", [
    ((0, [0], [0]), r"rows must be a positive integer, not 0"),
    ((2, [0, 1], [0]), r"row_of and slot_of must have the same length, not 2 and 1"),
    ((2, [0, 2], [0, 0]), r"row_of must be in 0\.\.1, not 2 \(feature 1\)"),
    ((2, [0, 1], [0, -1]), r"slot_of must be non-negative, not -1 \(feature 1\)"),
    ((2, [1, 0, 1], [3, 0, 3]), r"features 0 and 2 are both at row 1 slot 3"),
    ((2, [[0]], [[0]]), r"row_of must be a 1-D array"),
    ((2, [0.5], [0]), r"row_of must hold integers, not 0\.5"),
])
def test_placement_rejects_bad_arguments(args, message):
    with pytest.raises(ValueError, match=message):
        Placement(*args)


def test_placement_constructors_reject_bad_arguments():
    with pytest.raises(ValueError, match=r"W must be a 2-D array"):
        Placement.balanced(np.ones(3), 2)
    with pytest.raises(ValueError, match=r"rows must be a positive integer"):
        Placement.balanced(np.ones((2, 2)), 0)
    with pytest.raises(ValueError, match=r"n must be a non-negative integer, not -1"):
        Placement.modulo(-1, 2)


def test_check_fits_names_row_need_limit_and_placement():
    W = np.ones((3, 150))
    p = Placement.balanced(W, 4)
    p.check_fits(38, "input features", name="n_feat")
    with pytest.raises(ValueError, match=r"^input features: row 0 needs 38 slots, but a core "
                                         r"holds n_feat=32 \(balanced placement of 150 features "
                                         r"on 4 rows\)$"):
        p.check_fits(32, "input features", name="n_feat")
    with pytest.raises(ValueError, match=r"^outputs: row 1 needs 5 slots, but a core holds 4 "):
        Placement(2, [0, 1], [0, 4]).check_fits(4, "outputs")


# compile_gemm validation --------------------------------------------------------------------------

CFG = MeshConfig(rows=2, cols=2, n_feat=4, n_tok=4, n_out=3)


@pytest.mark.parametrize("kwargs, message", [
    (dict(W=np.ones((2, 2)) * 40000),
     r"W must fit in the operand range of int16 \(-32768\.\.32767\), not 40000 \(at \[0, 0\]\)"),
    (dict(W=[[1, -32769]]), r"W must fit .* not -32769 \(at \[0, 1\]\)"),
    (dict(W=[[1, 2]], X=[[1], [70000]]), r"X must fit .* not 70000 \(at \[1, 0\]\)"),
    (dict(W=[[1.5]]), r"W must hold integers, not 1\.5 \(at \[0, 0\]\)"),
    (dict(W=[["a"]]), r"W must hold integers"),
    (dict(W=[1, 2]), r"W must be a 2-D array"),
    (dict(W=np.ones((2, 0))), r"W must have at least one output and one input feature"),
    (dict(W=[[1, 2]], X=[[1, 2, 3]]), r"X must have n_in = 2 rows \(W is 1x2\), not 1"),
    (dict(W=[[1]], X=[[1, 2]], n_tokens=3), r"n_tokens=3 but X has 2 tokens"),
    (dict(W=[[1]], X=np.ones((1, 9), dtype=int)),
     r"^tokens: 9 do not fit the mesh, which holds n_tok \* cols = 4 \* 2 = 8$"),
    (dict(W=[[1]], n_tokens=9), r"n_tok \* cols = 4 \* 2 = 8"),
    (dict(W=[[1]], n_tokens=0), r"n_tokens must be a positive integer"),
    (dict(W=np.ones((1, 9), dtype=int)),
     (r"^input features: row 0 needs 5 slots, but a core holds n_feat=4 \(balanced placement "
      r"of 9 features on 2 rows\)$")),
    (dict(W=np.ones((1, 9), dtype=int), balance=False),
     r"input features: row 0 needs 5 slots, .*n_feat=4 \(modulo placement of 9 features"),
    (dict(W=np.ones((7, 1), dtype=int)),
     (r"^output features: row 0 needs 4 slots, but a core holds n_out=3 \(spanning placement "
      r"of 7 features on 2 rows\)$")),
    (dict(W=[[1, 2]], in_placement=Placement.modulo(3, 2)),
     r"in_placement places 3 features, W has 2 inputs"),
    (dict(W=[[1, 2]], out_placement=Placement.modulo(2, 2)),
     r"out_placement places 2 features, W has 1 outputs"),
    (dict(W=[[1, 2]], in_placement=Placement.modulo(2, 3)),
     r"in_placement is for 3 rows, the mesh has 2"),
    (dict(W=[[1, 2]], in_placement="balanced"), r"in_placement must be a Placement"),
    (dict(W=[[1]], out_placement=Placement(2, [1], [3])), r"row 1 needs 4 slots.*n_out=3"),
])
def test_compile_rejects_what_does_not_fit(kwargs, message):
    with pytest.raises(ValueError, match=message):
        compile_gemm(CFG, **kwargs)


def test_compile_rejects_a_config_that_is_not_one():
    with pytest.raises(ValueError, match=r"config must be a MeshConfig"):
        compile_gemm(CFG.core(0, 0), [[1]])


def test_operand_range_follows_the_format():
    cfg = MeshConfig(rows=1, cols=1, n_feat=2, n_tok=2, n_out=2,
                     fmt=FixedPoint(width=8, frac_bits=4, acc_width=16))
    compile_gemm(cfg, [[127, -128]])
    with pytest.raises(ValueError, match=r"int8 \(-128\.\.127\), not 128"):
        compile_gemm(cfg, [[128, 0]])


def test_raw_results_have_no_n_out_limit():
    prog = compile_gemm(CFG, np.ones((7, 1), dtype=int), raw=True)
    assert prog.raw and prog.n_out == 7
    with pytest.raises(ValueError, match="no Y to read"):
        prog.read_streams()


def test_defaults_and_fields():
    W = np.array([[0, 2, 0], [3, 0, 0]])
    prog = compile_gemm(CFG, W)
    assert isinstance(prog, GemmProgram)
    assert prog.tokens == CFG.max_tokens and prog.X is None and not prog.raw
    assert (prog.n_out, prog.n_in, prog.nnz) == (2, 3, 2)
    assert prog.in_placement == Placement.balanced(W, 2)
    assert prog.out_placement.kind == "spanning" and prog.spans
    assert compile_gemm(CFG, W, spans=False).out_placement == Placement.modulo(2, 2)
    assert compile_gemm(CFG, W, balance=False).in_placement == Placement.modulo(3, 2)
    assert compile_gemm(CFG, W, n_tokens=5).tokens == 5
    assert compile_gemm(CFG, W.astype(float)).nnz == 2
    with pytest.raises(ValueError, match="no X"):
        prog.x_blocks()


# Streams ------------------------------------------------------------------------------------------

def expected_streams(config, W, inp, outp, raw=False, zeros=False):
    """The streams as docs/mesh.md words them, with plain loops."""
    streams = {r: [] for r in range(config.rows)}
    op = "CR_OUT" if raw else "CR"
    # grouped by owner row, by index within a row
    for o in sorted(range(W.shape[0]), key=lambda o: (int(outp.row_of[o]), o)):
        for i in range(W.shape[1]):
            if W[o, i] or zeros:
                streams[int(inp.row_of[i])].append(("w", 0, int(W[o, i]), int(inp.slot_of[i])))
        for r in range(config.rows):
            streams[r].append((op, 0, int(outp.slot_of[o]) * config.rows + int(outp.row_of[o])))
    return streams


@pytest.mark.parametrize("rows, cols, density, raw, zeros", [
    (1, 1, 0.5, False, False), (3, 2, 0.5, False, False), (4, 1, 0.1, True, False),
    (2, 3, 0.3, False, True), (3, 3, 0.0, False, False), (2, 2, 1.0, True, False),
])
def test_streams_are_the_nonzeros_then_a_cr_per_output_in_every_row(rows, cols, density, raw,
                                                                     zeros):
    rng = np.random.default_rng(rows * 10 + cols)
    config = MeshConfig(rows=rows, cols=cols, n_feat=13, n_tok=4, n_out=11)
    W = sparse(rng, (11, 13), density, -32768, 32767)
    perm = rng.permutation(11)
    outp = Placement(rows, perm % rows, perm // rows)
    prog = compile_gemm(config, W, in_placement=None, out_placement=outp, raw=raw, zeros=zeros,
                        spans=False)
    want = expected_streams(config, W, prog.in_placement, outp, raw, zeros)
    assert set(prog.streams) == set(range(rows))
    for r in range(rows):
        assert decoded(prog.streams[r]) == want[r]
        assert all(isinstance(w, int) for w in prog.streams[r])
    n_weights = W.size if zeros else np.count_nonzero(W)
    assert prog.nnz == n_weights == prog.weights_per_row.sum()
    assert prog.stream_lengths.tolist() == [w + 11 for w in prog.weights_per_row.tolist()]
    assert prog.cr_args().tolist() == (outp.slot_of * rows + outp.row_of).tolist()


def test_weight_wavelets_match_the_pe_builders():
    from wse.fabric.pe_model import cr, weight
    W = np.array([[-5, 0, 32767], [0, -32768, 1]])
    prog = compile_gemm(CFG, W, balance=False, spans=False)
    p = CFG.core(0, 0)
    assert prog.streams[0] == [weight(p, -5, 0), weight(p, 32767, 1), cr(p, 0),
                               weight(p, 1, 1), cr(p, 1)]
    assert prog.streams[1] == [cr(p, 0), weight(p, -32768, 0), cr(p, 1)]
    assert compile_gemm(CFG, W, balance=False, raw=True,
                        spans=False).streams[1][0] == cr(p, 0, raw=True)
    # with spans: output 0 (weights in row 0 only) is owned by row 0 and row 1 gets no CR for
    # it; output 1 (both rows) is owned by one of them, the other sends its psums on
    spanned = compile_gemm(CFG, W, balance=False, spans=True)
    assert spanned.out_placement == Placement(2, [0, 1], [0, 0])
    assert spanned.streams[0] == [weight(p, -5, 0), weight(p, 32767, 1), cr(p, 0, quiet_s=True),
                                  weight(p, 1, 1), cr(p, 1)]
    assert spanned.streams[1] == [weight(p, -32768, 0), cr(p, 1)]


# Compressed rows ----------------------------------------------------------------------------------

def csr(W, *, explicit_zeros=None):
    """``(indptr, indices, values)`` of ``W``'s nonzeros, plus the entries where
    ``explicit_zeros`` is set (stored as zeros)."""
    keep = W != 0 if explicit_zeros is None else (W != 0) | explicit_zeros
    rows, cols = np.nonzero(keep)
    indptr = np.concatenate(([0], np.cumsum(np.bincount(rows, minlength=W.shape[0]))))
    return indptr.astype(np.int32), cols.astype(np.int32), W[rows, cols].astype(np.int16)


def same_program(a, b):
    assert a.streams == b.streams
    assert (a.weights_per_row == b.weights_per_row).all() and a.nnz == b.nnz
    assert a.in_placement == b.in_placement and a.out_placement == b.out_placement
    assert (a.n_out, a.n_in, a.tokens, a.raw, a.zeros) == (b.n_out, b.n_in, b.tokens, b.raw,
                                                           b.zeros)
    assert (a.W == b.W).all() and a.density == b.density


@pytest.mark.parametrize("seed", range(6))
def test_compressed_rows_compile_to_the_dense_program(seed):
    rng = np.random.default_rng(seed)
    rows, cols = int(rng.integers(1, 5)), int(rng.integers(1, 4))
    config = MeshConfig(rows=rows, cols=cols, n_feat=16, n_tok=4, n_out=16)
    n_out, n_in = int(rng.integers(1, rows * 16 + 1)), int(rng.integers(1, rows * 16 + 1))
    W = sparse(rng, (n_out, n_in), float(rng.choice([0.0, 0.05, 0.3, 1.0])), -32768, 32767)
    X = sparse(rng, (n_in, int(rng.integers(1, config.max_tokens + 1))), 0.5)
    options = dict(raw=bool(rng.integers(2)), balance=bool(rng.integers(2)),
                   zeros=bool(seed % 3 == 0))
    explicit = rng.random(W.shape) < 0.1          # stored zeros are not streamed either
    dense = compile_gemm(config, W, X, **options)
    sparse_prog = compile_gemm_csr(config, W.shape, *csr(W, explicit_zeros=explicit), X,
                                   **options)
    same_program(dense, sparse_prog)
    assert dense.useful_macs() == sparse_prog.useful_macs()
    assert dense.load_streams() == sparse_prog.load_streams()
    with pytest.MonkeyPatch.context() as patch:
        if not options["zeros"]:              # (streaming zeros needs every entry)
            patch.setattr(SparseRows, "dense", no_dense)
        rows_prog = compile_gemm(config, SparseRows.from_dense(W), X, **options)  # the System's
    same_program(dense, rows_prog)


def no_dense(rows):
    raise AssertionError("a dense W was built")


def test_compressed_rows_never_need_a_dense_w(monkeypatch):
    config = MeshConfig(rows=2, cols=1, n_feat=4, n_tok=4, n_out=4)
    monkeypatch.setattr(SparseRows, "dense", no_dense)    # built only if someone asks for W
    prog = compile_gemm_csr(config, (3, 5), [0, 2, 2, 3], [1, 4, 0], [7, -2, 0])
    prog.load_streams(np.ones((5, 4), dtype=np.int64))
    assert prog.nnz == 2 and prog.density == 2 / 15
    monkeypatch.undo()
    assert prog.W.tolist() == [[0, 7, 0, 0, -2], [0, 0, 0, 0, 0], [0, 0, 0, 0, 0]]
    assert not prog.W.flags.writeable
    same_program(prog, compile_gemm(config, prog.W))


@pytest.mark.parametrize("args, message", [
    (((3, 5), [0, 1, 2], [0, 1], [1, 1]), r"^indptr must be 4 non-decreasing offsets from 0"),
    (((3, 5), [0, 1, 1, 2], [0, 5], [1, 1]), r"^indices must be columns in 0\.\.4, not 5$"),
    (((3, 5), [0, 2, 2, 2], [3, 1], [1, 1]), r"^indices must be ascending within each row$"),
    (((3, 5), [0, 2, 2, 2], [1, 1], [1, 1]), r"^indices must be ascending within each row$"),
    (((3, 5), [0, 1, 1, 1], [0], [40000]), r"^values must fit in the operand range of int16"),
    (((3, 5), [0, 1, 1, 1], [0], [1.5]), r"^values must hold integers, not 1\.5"),
    (((0, 5), [0], [], []), r"^shape\[0\] must be a positive integer, not 0$"),
    ((5, [0], [], []), r"^shape must be a pair \(n_out, n_in\), not 5$"),
])
def test_compressed_rows_are_checked(args, message):
    with pytest.raises(ValueError, match=message):
        compile_gemm_csr(CFG, *args)


# Load, read, decode -------------------------------------------------------------------------------

def test_x_blocks_deal_tokens_to_columns_and_features_to_slots():
    rng = np.random.default_rng(1)
    config = MeshConfig(rows=3, cols=2, n_feat=4, n_tok=4, n_out=4)
    W = sparse(rng, (5, 10), 0.5)
    X = rng.integers(-9, 9, (10, 7))
    prog = compile_gemm(config, W, X)
    blocks = prog.x_blocks()
    p = prog.in_placement
    assert set(blocks) == set(config.tiles)
    for (r, c), block in blocks.items():
        assert block.shape == (p.slots_per_row()[r], 4) and block.dtype == np.int64
        for s in range(block.shape[0]):
            (i,) = np.flatnonzero((p.row_of == r) & (p.slot_of == s))
            for lt in range(4):
                t = lt * 2 + c
                assert block[s, lt] == (X[i, t] if t < 7 else 0)


@pytest.mark.parametrize("tokens", [6, 5])
def test_load_streams_give_every_core_its_block(tokens):
    """Each column's SELECT, TOKENS and ADDR first (an odd word alone after it, then an ADDR
    with ``pairs`` of the next), then LOAD pairs dealt out in rounds, at most ``GROUP`` to a
    column at a time; every core of a row, running the row's whole stream, ends with its block
    and keeps its commands alone."""
    rng = np.random.default_rng(2)
    config = MeshConfig(rows=3, cols=2, n_feat=6, n_tok=4, n_out=4)
    W = sparse(rng, (5, 16), 0.5)
    X = rng.integers(-32768, 32767, (16, tokens))
    prog = compile_gemm(config, W, X)
    streams = prog.load_streams()
    blocks = prog.x_blocks()
    cmd = config.plan.cmd
    active = prog.active_tokens().tolist()
    assert active == ([3, 3] if tokens == 6 else [3, 2])
    for r in range(3):
        ops = decoded(streams[r])
        k = 0
        words = [blocks[(r, c)][:, :active[c]].size for c in range(2)]
        for c in range(2):
            assert ops[k:k + 2] == [("SELECT", cmd, c), ("TOKENS", cmd, active[c])]
            k += 2
            if words[c] % 2:
                assert [op[0] for op in ops[k:k + 3]] == ["ADDR", "w", "ADDR"]
                assert ops[k][2] == 0 and ops[k + 2][2] >> 16 & 1       # then pairs
                k += 3
            elif words[c]:
                assert ops[k][0] == "ADDR" and ops[k][2] == 1 << 16    # slot 0, pairs
                k += 1
        loads = {0: 0, 1: 0}
        selected = None
        for op in ops[k:]:
            if op[0] == "SELECT":
                selected, run = op[2], 0
                continue
            assert op[0] == "w"
            run += 1
            assert run <= loads_mod.GROUP
            loads[selected] += 1
        assert loads == {c: words[c] // 2 for c in range(2)}
        assert max(loads.values()) > loads_mod.GROUP        # dealt out in several rounds
        for c in range(2):                # the row's whole stream reaches every core of the row
            core = CoreModel(config.core(r, c))
            core.run(streams[r])
            slots = blocks[(r, c)].shape[0]
            assert (core.x[:slots] == blocks[(r, c)]).all() and not core.x[slots:].any()
            assert core.active == active[c]
            assert core.gate.tolist() == [t < active[c] for t in range(4)]
            # TOKENS, the ADDR (or ADDR, the odd word, ADDR) and the pairs: a cycle each, and
            # a pair's second word one more
            header = (3 if words[c] % 2 else 1) if words[c] else 0
            assert not core.error
            assert core.counters["wavelets_in"] == 1 + header + words[c] // 2
            assert core.counters["busy_cycles"] == 1 + header + 2 * (words[c] // 2)


def test_load_streams_can_use_another_x():
    prog = compile_gemm(CFG, [[1, 2]], [[1, 2], [3, 4]])
    other = np.array([[5, 6], [7, 8]])
    assert prog.x_blocks(other)[(0, 1)].tolist() != prog.x_blocks()[(0, 1)].tolist()
    with pytest.raises(ValueError, match=r"X must have shape \(n_in, tokens\) = \(2, 2\)"):
        prog.x_blocks(np.ones((2, 3), dtype=int))


def test_read_streams_read_each_cores_used_slots():
    config = MeshConfig(rows=3, cols=2, n_feat=4, n_tok=4, n_out=4)
    prog = compile_gemm(config, np.ones((7, 2), dtype=int), spans=False)     # slots 3, 2, 2
    (streams,) = prog.read_streams()                    # three reply colors: one exchange
    cmd = config.plan.cmd
    for r, slots in enumerate([3, 2, 2]):
        assert decoded(streams[r]) == [op for c in range(2) for op in (
            ("SELECT", cmd, c), ("READ", cmd, slots * 4 << 16 | Y_BASE))]


def test_rows_that_share_a_reply_color_are_read_in_separate_exchanges():
    config = MeshConfig(rows=5, cols=2, n_feat=4, n_tok=4, n_out=4, reply_colors=2)
    outp = Placement(5, [0, 1, 2, 4], [0, 0, 0, 0])            # row 3 owns nothing
    prog = compile_gemm(config, np.ones((4, 2), dtype=int), out_placement=outp)
    assert [sorted(streams) for streams in prog.read_streams()] == [[0, 1], [2], [4]]
    rng = np.random.default_rng(8)
    Y = rng.integers(-32768, 32767, (4, 8))
    blocks = prog.read_blocks([y_to_outlets(prog, Y, rng, rows) for rows in ([0, 1], [2], [4])])
    assert (prog.decode_y(blocks) == Y).all()
    with pytest.raises(ValueError, match=r"outlets must be a list of 3 dict\(s\)"):
        prog.read_blocks(y_to_outlets(prog, Y, rng))


def test_long_reads_are_split():
    config = MeshConfig(rows=1, cols=2, n_feat=1, n_tok=256, n_out=32)
    prog = compile_gemm(config, np.ones((32, 1), dtype=int))
    assert MAX_READ == 4095
    words = 32 * 256
    want = [(Y_BASE + start, min(MAX_READ, words - start)) for start in range(0, words, MAX_READ)]
    ops = decoded(prog.read_streams()[0][0])
    got = [(arg & 0xFFFF, arg >> 16) for _, _, arg in ops]
    per_core = [(config.plan.cmd, 0)] + want
    assert got == [(c, 0) if k == 0 else a for c in range(2) for k, a in enumerate(per_core)]
    assert [op for op, *_ in ops] == (["SELECT"] + ["READ"] * len(want)) * 2


def y_to_outlets(prog, Y, rng, rows=None):
    """What the outlets would carry for READs of a result ``Y`` in the rows ``rows`` (every
    row by default), rows interleaved at random."""
    cfg, p = prog.config, prog.out_placement
    outlets = {}
    for c in range(cfg.cols):
        per_row = []
        for r, slots in enumerate(p.slots_per_row()):
            if rows is not None and r not in rows:
                continue
            block = np.zeros((slots, cfg.n_tok), dtype=np.int64)
            for o in np.flatnonzero(p.row_of == r):
                for lt in range(cfg.n_tok):
                    t = lt * cfg.cols + c
                    if t < prog.tokens:
                        block[p.slot_of[o], lt] = Y[o, t]
            active = prog.active_tokens()[c]           # the READ steps over the rest
            per_row.append(list(pack(block[:, :active].ravel() & 0xFFFFFFFF,
                                     cfg.plan.out(r)).tolist()))
        outlets[c] = interleave(per_row, rng)
    return outlets


def interleave(lists, rng):
    lists = [list(x) for x in lists]
    out = []
    while any(lists):
        k = rng.choice([i for i, x in enumerate(lists) if x])
        out.append(lists[k].pop(0))
    return out


def test_read_blocks_and_decode_y_round_trip():
    rng = np.random.default_rng(3)
    config = MeshConfig(rows=3, cols=2, n_feat=4, n_tok=4, n_out=4)
    outp = Placement(3, [2, 0, 2, 1, 0, 2], [3, 0, 1, 0, 2, 0])
    prog = compile_gemm(config, np.ones((6, 2), dtype=int), n_tokens=7, out_placement=outp)
    Y = rng.integers(-32768, 32767, (6, 7))
    blocks = prog.read_blocks([y_to_outlets(prog, Y, rng)])
    assert blocks[(1, 0)].shape == (1, 4) and blocks[(2, 1)].shape == (4, 4)
    assert (prog.decode_y(blocks) == Y).all()


def test_decode_errors_name_what_is_wrong():
    prog = compile_gemm(CFG, np.ones((3, 1), dtype=int), spans=False)       # slots 2, 1
    ok = {(r, c): np.zeros((2 - r, 4)) for r in range(2) for c in range(2)}
    del ok[(1, 0)]
    with pytest.raises(ValueError, match=r"no Y block of core \(1,0\)"):
        prog.decode_y(ok)
    ok[(1, 0)] = np.zeros((1, 3))
    with pytest.raises(ValueError, match=r"Y block of core \(1,0\) must have shape \(1, 4\)"):
        prog.decode_y(ok)
    with pytest.raises(ValueError, match=r"outlet 0 carried 0 READ word\(s\) of row 0 "
                                         r"\(color 6\), expected 8"):
        prog.read_blocks([{}])
    with pytest.raises(ValueError, match=r"outlet 0 carried a wavelet of color 1, which is no "
                                         r"reply color of rows \[0, 1\]"):
        prog.read_blocks([{0: [int(pack(0, 1))]}])
    with pytest.raises(ValueError, match=r"no column 5"):
        prog.read_blocks([{5: []}])
    with pytest.raises(ValueError, match="not a raw or act program"):
        prog.decode_raw({})


def test_decode_raw_takes_outputs_in_order_per_owner():
    rng = np.random.default_rng(4)
    config = MeshConfig(rows=2, cols=3, n_feat=4, n_tok=2, n_out=1)
    outp = Placement(2, [1, 1, 0, 1, 0], [7, 0, 3, 2, 0])      # slots do not matter raw
    prog = compile_gemm(config, np.ones((5, 1), dtype=int), n_tokens=5, out_placement=outp,
                        raw=True)
    totals = rng.integers(-2**31, 2**31, (5, 5))
    outlets = {}
    for c in range(3):
        per_row = []
        for r in range(2):
            words = []
            for o in prog.output_order[outp.row_of[prog.output_order] == r]:  # CR order
                for lt in range(2):
                    t = lt * 3 + c
                    if t < 5:                        # padding tokens send nothing
                        words.append(int(totals[o, t]) & 0xFFFFFFFF)
            per_row.append(pack(np.array(words, dtype=np.uint64), config.plan.out(r)).tolist())
        outlets[c] = interleave(per_row, rng)
    assert (prog.decode_raw(outlets) == totals).all()
    outlets[1] = outlets[1][1:]
    with pytest.raises(ValueError, match=r"outlet 1 carried \d raw result word\(s\) of row \d"):
        prog.decode_raw(outlets)


def test_raw_results_are_owned_by_rows_with_distinct_reply_colors():
    config = MeshConfig(rows=5, cols=2, n_feat=4, n_tok=2, n_out=1, reply_colors=2)
    assert config.plan.raw_rows() == [1, 2]
    prog = compile_gemm(config, np.ones((5, 1), dtype=int), raw=True)
    assert prog.out_placement.row_of.tolist() == [1, 2, 1, 2, 1]
    assert prog.cr_args().tolist() == [1, 2, 6, 7, 11]
    with pytest.raises(ValueError, match=r"^output features: rows 0 and 2 both own raw results "
                                         r"but share reply color 6 \(a 5-row mesh has 2 reply "
                                         r"colors\): place raw outputs on rows with distinct "
                                         r"reply colors, such as plan.raw_rows\(\) \[1, 2\]$"):
        compile_gemm(config, np.ones((5, 1), dtype=int), raw=True,
                     out_placement=Placement.modulo(5, 5))
    # not raw: any row may own outputs, they are read in groups
    assert compile_gemm(config, np.ones((5, 1), dtype=int)).out_placement.row_of.tolist() == \
        list(range(5))
    with pytest.raises(ValueError, match=r"among must be distinct rows"):
        Placement.modulo(3, 5, among=[1, 1])


def test_a_carriage_return_argument_too_wide_names_the_limit():
    config = MeshConfig(rows=2, cols=1, n_feat=1, n_tok=1, n_out=1)
    far = Placement(2, [1], [1 << 24])             # slot * rows + row = 2**25 + 1
    with pytest.raises(ValueError, match=r"^output features: a carriage return argument of "
                                         r"33554433 \(slot \* rows \+ row\) does not fit its "
                                         r"25 bits$"):
        compile_gemm(config, [[1]], raw=True, out_placement=far)
    compile_gemm(config, [[1]], raw=True, out_placement=Placement(2, [1], [(1 << 24) - 1]))


# Figures ------------------------------------------------------------------------------------------

def test_useful_macs_and_ideal_cycles():
    config = MeshConfig(rows=2, cols=2, n_feat=4, n_tok=4, n_out=4, lanes=2)
    W = np.array([[1, 0, 2], [0, 0, 3]])
    X = np.array([[1, 0, 1], [5, 5, 5], [0, 2, 2]])
    prog = compile_gemm(config, W, X)
    # W[0,0] x 2 nonzeros + W[0,2] x 2 + W[1,2] x 2
    assert prog.useful_macs() == 6 and prog.ideal_cycles() == 1      # 6 / 8, rounded up
    assert prog.density == 0.5
    assert compile_gemm(config, W, np.zeros((3, 2), dtype=int)).ideal_cycles() == 0


def test_a_large_layer_compiles():
    rng = np.random.default_rng(5)
    config = MeshConfig(rows=4, cols=4, n_feat=128, n_tok=8, n_out=128)
    W = sparse(rng, (512, 512), 0.5, -32768, 32767)
    prog = compile_gemm(config, W)
    assert prog.nnz == np.count_nonzero(W)
    assert sum(prog.stream_lengths) == prog.nnz + 512 * 4


# Partial sums: only the rows an output needs ------------------------------------------------------

def _spans_by_hand(program):
    """``{(o, r): (quiet_n, quiet_s)}`` for every row ``r`` that takes part in output ``o``, with
    plain loops over ``docs/mesh.md``'s rule."""
    R = program.config.rows
    W = program.W if not program.zeros else np.ones_like(program.W)
    part = {}
    for o in range(program.n_out):
        rows = {int(program.in_placement.row_of[i]) for i in np.flatnonzero(W[o])}
        if program.mask is not None and not program.mask[o].any():
            continue                    # gated off everywhere: its results are 0, no CR at all
        owner = int(program.out_placement.row_of[o])
        if rows:
            assert min(rows) <= owner <= max(rows), (o, rows, owner)
        runs = [r == owner or (r < owner and any(s <= r for s in rows))
                or (r > owner and any(s >= r for s in rows)) for r in range(R)]
        for r in range(R):
            if runs[r]:
                part[(o, r)] = (0 < r <= owner and not runs[r - 1],
                                owner <= r < R - 1 and not runs[r + 1])
    return part


@pytest.mark.parametrize("seed", range(6))
def test_each_row_gets_a_cr_only_for_the_outputs_it_takes_part_in(seed):
    rng = np.random.default_rng(seed)
    rows = int(rng.integers(2, 6))
    config = MeshConfig(rows=rows, cols=2, n_feat=16, n_tok=4, n_out=16)
    n_out, n_in = int(rng.integers(1, 40)), int(rng.integers(1, 40))
    W = sparse(rng, (n_out, n_in), float(rng.choice([0.02, 0.1, 0.5])), -32768, 32767)
    mask = rng.random((n_out, 8)) < 0.3 if seed % 3 == 2 else None
    prog = compile_gemm(config, W, n_tokens=8, raw=bool(seed % 2), mask=mask, spans=True)
    want = _spans_by_hand(prog)
    by_arg = {int(a): o for o, a in enumerate(prog.cr_args())}
    got = {}
    for r in range(rows):
        for _kind, _, arg in (w for w in decoded(prog.streams[r]) if w[0] in ("CR", "CR_OUT")):
            fields = CR_ARG.unpack(arg)
            o = by_arg[int(fields["o"])]
            assert (o, r) not in got and not fields["skip"]
            got[(o, r)] = (bool(fields["quiet_n"]), bool(fields["quiet_s"]))
    assert got == want
    # the outputs whose weights lie in two rows or more come grouped by owner
    chained = [o for o in prog.output_order.tolist()
               if len({r for (p, r) in want if p == o}) > 1]
    owners = prog.out_placement.row_of[chained].tolist()
    assert owners == sorted(owners)


@pytest.mark.parametrize("raw", [False, True])
def test_spans_compute_what_every_row_reducing_computes(raw):
    """The wavelet-level golden model (every core's commands, the psums it waits for) runs both
    programs to the same results, equal to the reference."""
    from wse.fabric.mesh_model import MeshModel
    from wse.fabric.reference import gemm_reference

    rng = np.random.default_rng(3)
    config = MeshConfig(rows=4, cols=2, n_feat=16, n_tok=4, n_out=16)
    W = sparse(rng, (40, 50), 0.03, -300, 300)
    X = rng.integers(-300, 300, (50, 8))
    results = []
    for spans in (True, False):
        prog = compile_gemm(config, W, X, raw=raw, spans=spans)
        mesh = MeshModel(config)
        results.append(mesh.run_program(prog, X))
        np.testing.assert_array_equal(results[-1], gemm_reference(config, prog, X)[int(raw)])
    np.testing.assert_array_equal(*results)
    assert sum(map(len, compile_gemm(config, W, X, raw=raw).streams.values())) < sum(
        map(len, compile_gemm(config, W, X, raw=raw, spans=False).streams.values()))


def test_spans_are_chosen_when_a_quarter_of_the_rows_have_no_part():
    rng = np.random.default_rng(5)
    config = MeshConfig(rows=4, cols=2, n_feat=16, n_tok=4, n_out=16)
    assert compile_gemm(config, sparse(rng, (40, 60), 0.02, 1, 9)).spans
    assert not compile_gemm(config, sparse(rng, (40, 60), 0.5, 1, 9)).spans
