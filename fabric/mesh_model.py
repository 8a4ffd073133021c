"""Golden model of the whole mesh at the wavelet level.

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

:func:`fabric.reference.gemm_reference` computes the same results for a
:class:`~fabric.program.GemmProgram` without wavelets, vectorised over outputs and tokens.
"""

import operator
from collections import deque

import numpy as np

from wse.rtl import isa
from wse.rtl.wavelet import WAVELET_BITS, ControlOp, pack, unpack

from .config import MeshConfig
from .pe_intake import selection
from .pe_model import CoreModel
from .program import GemmProgram

__all__ = ["MeshModel"]

_CR_OPS = (ControlOp.CR.value, ControlOp.CR_OUT.value, ControlOp.CR_ACT.value,
           ControlOp.CR_DELTA.value)
_X_WRITES = (ControlOp.CR_ACT.value, ControlOp.CR_DELTA.value)
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
        dropped = (owner == row) & (((slot >= cfg.n_out) & (op[at] == ControlOp.CR.value))
                                    | ((slot >= cfg.n_feat)
                                       & np.isin(op[at], _X_WRITES)))
        idle = dropped | (arg["skip"] == 1)
        need_n = (0 < row) & (row <= owner) & ~idle & (arg["quiet_n"] == 0)
        need_s = (owner <= row) & (row < cfg.rows - 1) & ~idle & (arg["quiet_s"] == 0)
        return list(zip(at.tolist(), o.tolist(), op[at].tolist(), need_n.tolist(),
                        need_s.tolist()))

    def _advance(self, tile, q, inbox, outlets):
        """Run ``tile``'s commands up to its next carriage return whose psums are not queued;
        route what it sends. Returns the neighbours that got psums. A CR takes a psum from
        each side it needs for every token its gate lets through (the owner of a CR_DELTA: every
        active token; ``docs/pe.md``): the gate the commands before it leave, so a queue that
        changes gates (MASK, TOKENS) runs a CR at a time."""
        core = self.cores[tile]
        avail = self._avail[tile]
        touched = []
        while True:
            end = len(q.words)
            gate = int(core.gate.sum())         # what the next CR visits, unless gates change
            while q.cr < len(q.crs):
                index, o, op, need_n, need_s = q.crs[q.cr]
                if q.gating and index > q.pos:
                    end = index                 # run up to it, then see its gate
                    break
                # the owner of a CR_DELTA visits every active token
                visits = (core.active if op == ControlOp.CR_DELTA.value
                          and o % self.config.rows == tile[0] else gate)
                if avail[0] < need_n * visits or avail[1] < need_s * visits:
                    end = index
                    break
                avail[0] -= need_n * visits
                avail[1] -= need_s * visits
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
        if program.streamed:
            return program.decode_raw(outlets)
        reads = [self.exchange(streams) for streams in program.read_streams()]
        return program.decode_y(program.read_blocks(reads))
