"""Golden model of the whole mesh at the wavelet level, and a fast bit-exact GEMM reference.

:class:`MeshModel` is ``rows x cols`` :class:`~fabric.pe_model.CoreModel` s wired by the color
plan of ``docs/mesh.md``: a row's intake multicasts ``weight`` and ``cmd`` to every core of the
row (each core keeps the ``cmd`` wavelets meant for its column, by SELECT); a core's
``psum_to_s`` / ``psum_to_n`` words go to the core below / above, its ``out`` words down its
column to outlet ``c``. It is untimed: order is kept per core (commands), per psum FIFO and per
(outlet, color), as on the fabric, and nothing else is promised (interleaving across colors at
an outlet is the model's own). Two rows that share a reply color replying in one exchange is a
host error (their words would mix at the outlet): a ``ValueError``.

A carriage return needs its neighbours' psums (``docs/pe.md``, "The partial-sum engine"), so
:meth:`MeshModel.exchange` runs a worklist: each core runs its commands up to the next carriage
return whose psums are not queued yet, the words it sends go to their neighbours (which are
then worked again), until nothing can move. Commands left then are a protocol bug in the
streams (a row missing a carriage return, say): a ``RuntimeError`` names the stuck cores and
what they wait for.

:func:`gemm_reference` computes what the mesh computes for a :class:`~fabric.program.GemmProgram`
without wavelets, vectorised over outputs and tokens, saturating in the same order.
"""

import operator
from collections import deque

import numpy as np

from wse.rtl import isa
from wse.rtl.wavelet import WAVELET_BITS, ControlOp, pack, unpack

from . import numerics
from .config import MeshConfig
from .pe_model import CoreModel, selection
from .program import GemmProgram

__all__ = ["MeshModel", "gemm_reference"]

_CR_OPS = (ControlOp.CR.value, ControlOp.CR_OUT.value)
_GATE_OPS = (ControlOp.MASK.value, ControlOp.TOKENS.value)


class _Queue:
    """One core's commands of the current exchange and its carriage returns' psum needs."""

    def __init__(self, words, crs, gating=False):
        self.words = words          # packed wavelets (ints), ramp order
        self.crs = crs              # [(index, o, op, need_n, need_s)]
        self.gating = gating        # holds a MASK or TOKENS: gates change between CRs
        self.pos = 0                # next command to run
        self.cr = 0                 # next entry of crs

    @property
    def done(self):
        return self.pos == len(self.words)


class MeshModel:
    """The mesh of ``config`` as communicating core models. State persists across
    :meth:`exchange` calls (load, compute and read are separate exchanges for the host).

    Members
    -------
    config : MeshConfig
    cores : dict (r, c) -> CoreModel
    drops : dict (r, c) -> int, wavelets a tile's router dropped (foreign colors at an intake
        count at ``(r, 0)``).
    """

    def __init__(self, config):
        if not isinstance(config, MeshConfig):
            raise ValueError(f"config must be a MeshConfig, not {config!r}")
        self.config = config
        self.cores = {t: CoreModel(config.core(*t)) for t in config.tiles}
        self.drops = dict.fromkeys(config.tiles, 0)
        # psum words queued at each core's engine and not yet claimed: [from_n, from_s]
        self._avail = {t: [0, 0] for t in config.tiles}

    def __repr__(self):
        return f"<MeshModel of a {self.config}>"

    # State --------------------------------------------------------------------------------------

    def counters(self):
        """``{(r, c): counters dict}`` of every core (``docs/pe.md``, "Counters")."""
        return {t: dict(core.counters) for t, core in self.cores.items()}

    @property
    def error(self):
        """Any core's sticky error, or any wavelet dropped by a router."""
        return any(core.error for core in self.cores.values()) or any(self.drops.values())

    @property
    def overflow(self):
        """Any core saturated an accumulation or a requantisation."""
        return any(core.counters["overflow"] for core in self.cores.values())

    def pending_psums(self):
        """``{(r, c): (from_n, from_s)}`` psum words queued at cores whose carriage returns have
        not claimed them (all zero after a well-formed program)."""
        return {t: tuple(a) for t, a in self._avail.items()}

    # Exchange -----------------------------------------------------------------------------------

    def exchange(self, streams):
        """Send ``streams`` (``{row: iterable of packed wavelets}`` into the west intake of each
        row) through the mesh and run every core as far as it goes.

        Returns ``{col: [packed wavelets]}`` that left the south outlet of each column (order
        kept per color). ``ValueError`` for a malformed wavelet or row,
        ``NotImplementedError`` for configuration (color 31) or a ``TEARDOWN`` on a routed
        color, ``RuntimeError`` if commands are left that wait for psums that never come.
        """
        queues = self._route_intakes(streams)
        outlets = {c: [] for c in range(self.config.cols)}
        self._repliers = {}
        inbox = {t: ([], []) for t in self.cores}
        work = deque(t for t in self.config.tiles if not queues[t].done)
        waiting = set(work)
        while work:
            tile = work.popleft()
            waiting.discard(tile)
            for nb in self._advance(tile, queues[tile], inbox, outlets):
                if nb not in waiting:
                    waiting.add(nb)
                    work.append(nb)
        for tile, (from_n, from_s) in inbox.items():     # psums nobody asked for (yet)
            if from_n or from_s:
                self.cores[tile].run([], psum_from_n=from_n, psum_from_s=from_s)
        stuck = [self._waits(t, q) for t, q in queues.items() if not q.done]
        if stuck:
            raise RuntimeError("the mesh is stuck (a protocol bug in the streams: every row "
                               "must get the same carriage returns in the same order): "
                               + "; ".join(stuck))
        return outlets

    def _route_intakes(self, streams):
        """Every core's commands of ``streams``, with the psum needs of its carriage returns."""
        cfg, plan = self.config, self.config.plan
        if not isinstance(streams, dict):
            raise ValueError(f"streams must be a dict row -> wavelets, not {type(streams)}")
        unpacked = {}
        for r, wavelets in streams.items():
            if not isinstance(r, (int, np.integer)) or not 0 <= r < cfg.rows:
                raise ValueError(f"streams has no row {r!r} (the mesh has {cfg.rows})")
            words = [operator.index(w) for w in wavelets]
            bad = [w for w in words if not 0 <= w < 1 << WAVELET_BITS]
            if bad:
                raise ValueError(f"wavelets must be {WAVELET_BITS}-bit integers, not {bad[0]!r} "
                                 f"(row {r})")
            arr = np.array(words, dtype=np.uint64)
            data, color, ctrl = unpack(arr)
            if (color == plan.cfg_color).any():
                raise NotImplementedError(
                    f"configuration wavelets (color {plan.cfg_color}) at the intake of row {r}: "
                    f"the mesh model has fixed routes and does not model configuration")
            routed = (color == plan.weight) | (color == plan.cmd)
            op = isa.CONTROL.unpack(data)["op"]
            teardown = routed & (ctrl == 1) & (op == ControlOp.TEARDOWN.value)
            if teardown.any():
                raise NotImplementedError(
                    f"TEARDOWN on color {int(color[teardown][0])} at the intake of row {r}: it "
                    f"blocks the color until configuration reopens it, which the mesh model "
                    f"does not model")
            unpacked[int(r)] = (arr, data, color, ctrl, int((~routed).sum()))
        for r, (*_, dropped) in unpacked.items():
            self.drops[(r, 0)] += dropped
        queues = {}
        for (r, c) in cfg.tiles:
            if r not in unpacked:
                queues[(r, c)] = _Queue([], [])
                continue
            arr, data, color, ctrl, _ = unpacked[r]
            mine = np.flatnonzero((color == plan.weight) | (color == plan.cmd))
            control = isa.CONTROL.unpack(data[mine])
            kept, _ = selection(self.cores[(r, c)].params, self.cores[(r, c)].selected,
                                color[mine].tolist(), ctrl[mine].tolist(),
                                control["op"].tolist(),
                                isa.SELECT_ARG.unpack(control["arg"])["col"].tolist())
            kept = ctrl[mine] & np.array(kept, dtype=bool)
            needs = self._needs(r, data[mine], kept)
            gating = bool((kept.astype(bool) & np.isin(control["op"], _GATE_OPS)).any())
            queues[(r, c)] = _Queue(arr[mine].tolist(), needs, gating)
        return queues

    def _needs(self, row, data, ctrl):
        """``[(index, o, op, need_n, need_s)]`` of the carriage returns among a core's
        commands (a CR acts the same on ``cmd`` and ``weight``; its flags say which psums it
        takes: ``docs/pe.md``)."""
        cfg = self.config
        op = isa.CONTROL.unpack(data)["op"]
        at = np.flatnonzero((ctrl == 1) & np.isin(op, _CR_OPS))
        arg = isa.CR_ARG.unpack(isa.CONTROL.unpack(data[at])["arg"])
        o = arg["o"]
        owner, slot = o % cfg.rows, o // cfg.rows
        dropped = (owner == row) & (slot >= cfg.n_out) & (op[at] == ControlOp.CR.value)
        idle = dropped | (arg["skip"] == 1)
        need_n = (0 < row) & (row <= owner) & ~idle & (arg["quiet_n"] == 0)
        need_s = (owner <= row) & (row < cfg.rows - 1) & ~idle & (arg["quiet_s"] == 0)
        return list(zip(at.tolist(), o.tolist(), op[at].tolist(), need_n.tolist(),
                        need_s.tolist()))

    def _advance(self, tile, q, inbox, outlets):
        """Run ``tile``'s commands up to its next carriage return whose psums are not queued;
        route what it sends. Returns the neighbours that got psums. A CR takes a psum from
        each side it needs for every token its gate lets through (``docs/pe.md``): the gate
        the commands before it leave, so a queue that changes gates (MASK, TOKENS) runs a CR
        at a time."""
        core = self.cores[tile]
        avail = self._avail[tile]
        touched = []
        while True:
            end = len(q.words)
            gate = int(core.gate.sum())         # what the next CR visits, unless gates change
            while q.cr < len(q.crs):
                index, _, _, need_n, need_s = q.crs[q.cr]
                if q.gating and index > q.pos:
                    end = index                 # run up to it, then see its gate
                    break
                if avail[0] < need_n * gate or avail[1] < need_s * gate:
                    end = index
                    break
                avail[0] -= need_n * gate
                avail[1] -= need_s * gate
                q.cr += 1
                gate = core.active              # what every CR leaves
                if q.gating:
                    end = index + 1
                    break
            if end == q.pos:
                return touched
            from_n, from_s = inbox[tile]
            sent = core.run(q.words[q.pos:end], psum_from_n=from_n, psum_from_s=from_s)
            inbox[tile] = ([], [])
            q.pos = end
            touched += self._route_sent(tile, sent, inbox, outlets)
            if not q.gating:
                return touched

    def _route_sent(self, tile, sent, inbox, outlets):
        r, c = tile
        colors = self.cores[tile].params.colors
        touched = []
        for color, step, side in ((colors.psum_to_s, 1, 0), (colors.psum_to_n, -1, 1)):
            words = sent.get(color, [])
            if not words:
                continue
            nb = (r + step, c)
            if nb not in self.cores:        # the plan never routes a psum off the mesh
                raise RuntimeError(f"core ({r},{c}) sent psums off the mesh (color {color})")
            inbox[nb][side].extend(words)
            self._avail[nb][side] += len(words)
            touched.append(nb)
        words = sent.get(colors.out, [])
        if words:
            other = self._repliers.setdefault((c, colors.out), r)
            if other != r:
                raise ValueError(f"rows {min(r, other)} and {max(r, other)} replied in the same "
                                 f"exchange on the same color {colors.out} (outlet {c}): their "
                                 f"words would mix; read rows that share a reply color in "
                                 f"separate exchanges (docs/mesh.md)")
            outlets[c].extend(pack(np.array(words, dtype=np.uint64), colors.out, 0).tolist())
        return touched

    def _waits(self, tile, q):
        """What a stuck core waits for, in words."""
        cfg = self.config
        r, c = tile
        index, o, op, need_n, need_s = q.crs[q.cr]
        name = ControlOp(op).name
        have = self._avail[tile]
        gate = int(self.cores[tile].gate.sum())
        lacks = [f"{gate} psums from the {side} (has {have[k]})"
                 for k, (side, need) in enumerate((("north", need_n), ("south", need_s)))
                 if need and have[k] < gate]
        return (f"core ({r},{c}) waits at command {index} of {len(q.words)} ({name} {o}, owner "
                f"row {o % cfg.rows}) for {' and '.join(lacks)}")

    # Convenience --------------------------------------------------------------------------------

    def run_program(self, program, X=None):
        """Load ``X``, run ``program``'s streams and fetch its results, as the host does: ``Y``
        (requantised) or, for a raw program, the 32-bit totals, ``[n_out, tokens]`` int64."""
        if not isinstance(program, GemmProgram) or program.config != self.config:
            raise ValueError("program must be a GemmProgram compiled for this mesh's config")
        self.exchange(program.load_streams(X))
        outlets = self.exchange(program.streams)
        if program.raw:
            return program.decode_raw(outlets)
        reads = [self.exchange(streams) for streams in program.read_streams()]
        return program.decode_y(program.read_blocks(reads))


# The fast reference -------------------------------------------------------------------------------

def gemm_reference(config, program, X=None, *, fast=True):
    """``(Y, raw)``: what the mesh computes for ``program`` on ``X``, bit for bit, each
    ``[n_out, tokens]`` int64 (``Y`` requantised, ``raw`` the owner's 32-bit totals).

    Each row accumulates its weights of an output in stream order (``i`` ascending), saturating
    at every step; the psum chain then adds rows from the top down to the owner and from the
    bottom up to it, the owner adding its northern then its southern psum, each step saturated
    (``docs/pe.md``, "The partial-sum engine"). In bf16 the same order in binary32, without
    saturation (``docs/numerics.md``), always step by step. With ``fast``, outputs whose
    ``|W| @ |X|`` stays within the accumulator range (nothing can saturate) are an exact
    ``W @ X``; the others, or all with ``fast=False``, go through the step-by-step path. A
    masked program's products outside its mask are not made (its gates: ``docs/pe.md``), so
    those results are 0.
    """
    if not isinstance(program, GemmProgram):
        raise ValueError(f"program must be a GemmProgram, not {program!r}")
    if config != program.config:
        raise ValueError("program was compiled for another config")
    fmt = config.fmt
    X = program.check_x(X)
    W = program.W
    gate = program.mask
    if fmt.is_float:                    # every addition in its order: no shortcut
        raw = _float_totals(config, program.in_placement, W, X, program.out_placement.row_of,
                            gate)
        Y, _ = numerics.requantise(fmt, raw)
        return Y, raw
    raw = np.empty((program.n_out, program.tokens), dtype=np.int64)
    slow = np.arange(program.n_out)
    if fast:
        # integers below 2**53 are exact in float64 (|w x| <= 2**30, n_in < 2**17)
        Wf, Xf = W.astype(np.float64), X.astype(np.float64)
        safe = (np.abs(Wf) @ np.abs(Xf) <= fmt.acc_max).all(axis=1)
        raw[safe] = (Wf[safe] @ Xf).astype(np.int64)
        if gate is not None:
            raw[safe] *= gate[safe]
        slow = np.flatnonzero(~safe)
    if slow.size:
        raw[slow] = _saturating(config, program.in_placement, W[slow], X,
                                program.out_placement.row_of[slow],
                                None if gate is None else gate[slow])
    Y, _ = numerics.requantise(fmt, raw)
    return Y, raw


def _saturating(config, in_placement, W, X, owners, gate=None):
    """The totals of outputs ``W`` (``[m, n_in]``) owned by rows ``owners``, step by step
    (``gate``: ``[m, tokens]``, the products made)."""
    fmt, R = config.fmt, config.rows
    lo, hi = fmt.acc_min, fmt.acc_max
    feats = [in_placement.features_of(r) for r in range(R)]
    K = max(len(f) for f in feats)
    index = np.zeros((R, K), dtype=np.int64)
    live = np.zeros((R, K), dtype=bool)
    for r, f in enumerate(feats):
        index[r, :len(f)] = f
        live[r, :len(f)] = True
    m, T = W.shape[0], X.shape[1]
    acc = np.zeros((R, m, T), dtype=np.int64)
    for k in range(K):
        w = np.where(live[:, k], W[:, index[:, k]], 0).T        # (R, m)
        x = np.where(live[:, k, None], X[index[:, k]], 0)       # (R, T)
        if gate is None:
            acc += w[:, :, None] * x[:, None, :]
        else:
            acc += w[:, :, None] * x[:, None, :] * gate[None]
        np.clip(acc, lo, hi, out=acc)
    down, up = acc.copy(), acc.copy()       # down[r]: what row r sends south; up[r]: north
    for r in range(1, R):
        down[r] = np.clip(acc[r] + down[r - 1], lo, hi)
    for r in range(R - 2, -1, -1):
        up[r] = np.clip(acc[r] + up[r + 1], lo, hi)
    o = np.arange(m)
    s = acc[owners, o]
    north = owners > 0
    s[north] = np.clip(s[north] + down[owners[north] - 1, o[north]], lo, hi)
    south = owners < R - 1
    s[south] = np.clip(s[south] + up[owners[south] + 1, o[south]], lo, hi)
    return s


def _float_totals(config, in_placement, W, X, owners, gate=None):
    """:func:`_saturating` in bf16: the same additions in the same order, in numpy ``float32``
    (IEEE, nearest even), products of nonzero operands only; binary32 bit patterns."""
    R = config.rows
    Wf = numerics.as_float32(W, operand=True)
    Xf = numerics.as_float32(X, operand=True)
    x_live = ~numerics.is_zero(config.fmt, X)
    w_live = ~numerics.is_zero(config.fmt, W)
    m, T = W.shape[0], X.shape[1]
    acc = np.zeros((R, m, T), dtype=np.float32)
    with np.errstate(all="ignore"):
        for r in range(R):
            for i in in_placement.features_of(r):      # stream order: i ascending
                live = w_live[:, i, None] & x_live[None, i]
                if gate is not None:
                    live &= gate
                acc[r] = np.where(live, acc[r] + Wf[:, i, None] * Xf[None, i], acc[r])
        down, up = acc.copy(), acc.copy()
        for r in range(1, R):
            down[r] = acc[r] + down[r - 1]
        for r in range(R - 2, -1, -1):
            up[r] = acc[r] + up[r + 1]
        o = np.arange(m)
        s = acc[owners, o]
        north = owners > 0
        s[north] = s[north] + down[owners[north] - 1, o[north]]
        south = owners < R - 1
        s[south] = s[south] + up[owners[south] + 1, o[south]]
    return numerics.from_float32(s)
