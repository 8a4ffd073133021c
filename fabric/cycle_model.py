"""A cycle model of a GEMM on the mesh: how long the compute phase takes, without the RTL.

The golden model (:mod:`fabric.mesh_model`) says *what* the mesh computes; this says roughly
*when*. It follows every core's dispatcher and partial-sum engine, output by output
(``docs/mesh.md``, "Cycle model"):

- a core's dispatcher runs its row's stream: an AXPY costs ``max(1, max over banks of the
  nonzero tokens of its slot)`` (1 for a zero weight; in a masked program only the tokens its
  gate lets through count, and each MASK of the core's column costs 1); a CR rides on the AXPY
  before it (a CR after a CR takes a cycle) and waits while every accumulator buffer but the
  active one is still with the engine;
- the engine reduces outputs in order, a cycle for each token its gate lets through (the
  column's active tokens, or an output's mask), when they queue (2 more from idle); it starts an
  output the cycle after its CR, and its first token waits for the first psum token of every
  neighbour it needs (that neighbour's first token plus ``hop`` cycles);
- every column runs the same stream, so a row's time is its slowest column's;
- the phase ends when the last engine has sent its last token, plus the drain to the outlets.

It ignores backpressure from full psum FIFOs and the hop-by-hop timing of the weight multicast;
over the 4x4 sweep of ``wse bench gemm`` it is within a few per cent of the RTL (the largest error
is in ``docs/results.md``), and the bench prints it beside every measured run.

The edge transfers around a compute phase have models of their own (``docs/mesh.md``, "Edge
transfers"): :func:`predict_load_cycles` (the ``X`` block of every core through the west
intakes) and :func:`predict_read_cycles` (the ``Y`` of every owner row out of the south
outlets).
"""

import numpy as np

from . import loads, masking, numerics
from .placement import Placement
from .program import GemmProgram

__all__ = ["CycleModel", "predict_cycles", "predict_dense_cycles", "predict_unmasked_cycles",
           "predict_load_cycles", "predict_read_cycles", "predict_io_cycles"]

#: Cycles from a core's engine sending a psum token to the neighbour's engine adding it: core
#: output register, router queue and hop, router queue, ramp, core psum FIFO.
HOP = 5
#: Engine cycles from its start to its first add: the start and the first read.
ENGINE_EXTRA = 2
#: Cycles from the first intake word to the first core's dispatcher (router queue, the ramp's
#: register, the command FIFO: ``docs/pe.md``, "The ramp"), and from the last engine token to
#: an idle mesh.
FILL, DRAIN = 4, 4

#: Edge transfers (``docs/mesh.md``, "Edge transfers"), fitted to the RTL and exact on the
#: meshes of ``tests/test_io_cycles.py``: a load follows each row's stream through its cores
#: (:mod:`fabric.loads`); a read ends when the slower of two resources is
#: done: a core sends a word every ``READ_WORD`` cycles, an outlet takes one a cycle from every
#: row of its column; then the last word crosses the rows below, ``READ_HOP`` cycles each.
READ_WORD, READ_CORE_EXTRA, READ_OUTLET_EXTRA, READ_HOP = 2, 3, 7, 2


class CycleModel:
    """The model's timeline for one program: ``cycles`` and per-core figures."""

    def __init__(self, program, X=None, *, acc_buffers=None, unmasked=False):
        if not isinstance(program, GemmProgram):
            raise TypeError(f"program must be a GemmProgram, not {program!r}")
        cfg = program.config
        self.program = program
        self.acc_buffers = cfg.acc_buffers if acc_buffers is None else acc_buffers
        self.masked = program.mask is not None and not unmasked
        self.engine = self._engine_tokens(program)
        costs = self._costs(program, program.check_x(X)) + self._bias_costs(program)
        self.cycles, self.busy, self.stall = self._run(program, costs)
        #: ``(rows, n_out)``: the dispatcher cycles each row spends on each output (its MASKs,
        #: AXPYs and bias), by output index
        self.costs = np.empty_like(costs)
        self.costs[:, self._schedule(program)[0]] = costs

    def _bias_costs(self, program):
        """``costs[r, k]`` of the biases: the owner of the ``k``-th output of the schedule
        runs an AXPY on the ones slot where its bias is nonzero, every active token nonzero:
        ``max(1, ceil(active / lanes))`` cycles in the column with the most active tokens."""
        cfg = program.config
        costs = np.zeros((cfg.rows, program.n_out), dtype=np.int64)
        if program.bias is None:
            return costs
        order, owners, _ = self._schedule(program)
        live = ~numerics.is_zero(cfg.fmt, program.bias[order])
        cost = max(1, -(-int(program.active_tokens().max()) // cfg.lanes))
        costs[owners[order][live], np.flatnonzero(live)] = cost
        return costs

    def _engine_tokens(self, program):
        """``(n_out,)``, by output index: the tokens the engines visit for each output (its
        busiest column's gate: the active tokens, or the mask's)."""
        if self.masked:
            return program.gates().sum(axis=2).max(axis=1)
        return np.full(program.n_out, int(program.active_tokens().max()), dtype=np.int64)

    def _costs(self, program, X):
        """``costs[r, k]``: the cycles row ``r`` spends on the ``k``-th output of the stream
        (its slowest column's: MASKs and AXPYs)."""
        cfg = program.config
        blocks = program.x_blocks(X)
        rows = {}
        for r in range(cfg.rows):
            per_col = []
            for c in range(cfg.cols):
                block = blocks.get((r, c))
                if block is None or not len(block):
                    per_col.append(np.ones(0, dtype=np.int64))
                    continue
                mask = (block != 0).reshape(len(block), cfg.n_tok // cfg.lanes, cfg.lanes)
                per_col.append(np.maximum(1, mask.sum(axis=1).max(axis=1)))
            rows[r] = per_col
        order = program.output_order
        W = program.W[order]
        slot_of, row_of = program.in_placement.slot_of, program.in_placement.row_of
        live = W != 0
        idle = np.zeros_like(live) if not program.zeros else ~live    # zero weights: 1 cycle
        if self.masked:     # outputs gated off everywhere are not streamed
            streamed = program.streamed_outputs[order][:, None]
            live, idle = live & streamed, idle & streamed
        costs = np.zeros((cfg.rows, program.n_out, cfg.cols), dtype=np.int64)
        takes_part = ~program.cr_flags()[0][order] if self.masked else None    # (n_out, rows)
        kept = None
        if program.keep is not None and not self.masked:    # a CR_DELTA's owner row is gated
            owned = program.out_placement.row_of[order]
            gates = masking.gates(program, program.keep)[order]
            masks = (masking.mask_words(program, program.keep) >= 0).sum(axis=2)[order]
            kept = owned, gates, masks
        for r in range(cfg.rows):
            feats = np.flatnonzero(row_of == r)
            if self.masked:
                costs[r] = self._masked_costs(program, blocks, r, feats, live, idle,
                                              takes_part[:, r])
                continue
            if feats.size:
                # per_feature[j, c]: the AXPY cycles of feature feats[j] in column c
                per_feature = np.stack([rows[r][c][slot_of[feats]] for c in range(cfg.cols)],
                                       axis=1)
                costs[r] = live[:, feats].astype(np.int64) @ per_feature
                costs[r] += idle[:, feats].sum(axis=1, dtype=np.int64)[:, None]
            if kept is not None:
                owned, gates, masks = kept
                mine = owned == r
                gated = self._masked_costs(program, blocks, r, feats, live, idle, mine,
                                           gates=gates, masks=masks)
                costs[r][mine] = gated[mine]
        return costs.max(axis=2)

    @staticmethod
    def _masked_costs(program, blocks, r, feats, live, idle, takes_part, *, gates=None,
                      masks=None):
        """``(n_out, cols)``: row ``r``'s cycles per output (stream order) and column when each
        output's AXPYs see only the tokens its gate lets through, plus the column's MASKs (in
        every row taking part in the output, ``takes_part``: the engines of a chain visit the
        same tokens). ``gates`` and ``masks``: the gates (``(n_out, cols, n_tok)``) and the
        MASKs per column (``(n_out, cols)``) in stream order, the program's by default."""
        cfg = program.config
        order = program.output_order
        if gates is None:
            gates = program.gates()[order]                      # (n_out, cols, n_tok)
            masks = program.masks_per_output()[order]           # (n_out, cols)
        tpb, lanes = cfg.n_tok // cfg.lanes, cfg.lanes
        on = live[:, feats].astype(np.int64)
        part = (live[:, feats] | idle[:, feats]).any(axis=1) | takes_part
        out = np.zeros((program.n_out, cfg.cols), dtype=np.int64)
        for c in range(cfg.cols):
            out[:, c] = masks[:, c] * part
            if not feats.size:
                continue
            nz = blocks[(r, c)][program.in_placement.slot_of[feats]] != 0   # (F, n_tok)
            nz = nz.reshape(len(feats), tpb, lanes).astype(np.int64)
            g = gates[:, c].reshape(program.n_out, tpb, lanes).astype(np.int64)
            per = np.einsum("oib,fib->ofb", g, nz).max(axis=2)             # (n_out, F)
            out[:, c] += (on * np.maximum(1, per)).sum(axis=1) + idle[:, feats].sum(axis=1)
        # every core takes every wavelet of its row's stream from its ramp, one a cycle: the
        # other columns' MASKs too (it discards them, but not faster than they arrive)
        arriving = masks.sum(axis=1) * part + (live[:, feats] | idle[:, feats]).sum(axis=1)
        return np.where(part[:, None], np.maximum(out, (arriving + 1)[:, None]), 0)

    def _run(self, program, costs):
        """Plain Python over ints (a row count is small; numpy per output costs more than it
        saves). A row whose CR skips an output (:meth:`~fabric.program.GemmProgram.cr_flags`)
        hands no buffer to its engine: it neither waits for one nor reduces, and its
        neighbours take no psum from it."""
        cfg = program.config
        R, n_buf = cfg.rows, self.acc_buffers
        order, owners, flags = self._schedule(program)
        owners = owners[order].tolist()
        engine = self.engine[order].tolist()
        skips, quiet_n, quiet_s = (f[order].tolist() for f in flags)
        n = program.n_out
        per_output = costs.T.tolist()                 # per_output[k][r]
        t = [FILL] * R                                # each row's dispatcher clock
        busy, stall = [0] * R, [0] * R
        ends = [[] for _ in range(R)]                 # engine idle again after each reduction
        first = [0] * R                               # engine adds its first token of output k
        cr = [0] * R
        last = 0
        for k in range(n):
            owner, skip, tokens = owners[k], skips[k], engine[k]
            for r in range(R):
                cost = per_output[k][r]
                if skip[r]:                           # no weight, no CR: nothing to do
                    continue
                fused = cost > 0                      # the CR rides on the row's last AXPY
                t[r] += cost
                busy[r] += cost
                c = t[r] - 1 if fused else t[r]
                if len(ends[r]) >= n_buf - 1:         # wait for a free accumulator buffer
                    c = max(c, ends[r][-(n_buf - 1)])
                stall[r] += c - (t[r] - 1) if fused else c - t[r] + 1
                if not (fused and c == t[r] - 1):
                    t[r] = c + 1
                cr[r] = c
            for r in (*range(owner), *range(R - 1, owner, -1), owner):
                if skip[r]:
                    continue
                start = cr[r] + 1
                if ends[r]:     # the first read may overlap the previous output's last add
                    start = max(start, ends[r][-1] - ENGINE_EXTRA)
                ready = start + ENGINE_EXTRA
                if 0 < r <= owner and not quiet_n[k][r]:
                    ready = max(ready, first[r - 1] + HOP)
                if owner <= r < R - 1 and not quiet_s[k][r]:
                    ready = max(ready, first[r + 1] + HOP)
                first[r] = ready
                ends[r].append(ready + tokens)
                last = max(last, ready + tokens)
        cycles = last + DRAIN if n else FILL
        return cycles, np.array(busy, dtype=np.int64), np.array(stall, dtype=np.int64)


    def _schedule(self, program):
        """``(order, owners, (skip, quiet_n, quiet_s))``: the stream order of the outputs, their
        owner rows and each row's CR flags."""
        unmasked = program.mask is not None and not self.masked
        return (program.output_order, program.out_placement.row_of,
                program.cr_flags(unmasked=unmasked))


def predict_cycles(program, X=None):
    """The modelled compute-phase cycles of ``program`` on its mesh."""
    return CycleModel(program, X).cycles


class _EveryWeight(CycleModel):
    """:class:`CycleModel` of a program's GEMM with every weight present, without compiling it:
    every output of a row costs the same, the sum of the AXPYs of that row's features, placed as
    :func:`~fabric.compiler.compile_gemm` places a ``W`` without zeros (balanced over equal
    counts: feature ``i`` at row ``i % rows``). The outputs keep the program's placement, unless
    it was chosen by the spans of the sparse weights: a dense ``W`` has a weight of every output
    in every row, so it gets the plain placement (``modulo``, grouped by owner) and every row
    reduces every output."""

    def _schedule(self, program):
        placement = program.out_placement
        if placement.kind == "spanning":
            cfg = program.config
            among = cfg.plan.raw_rows() if program.streamed and cfg.plan.raw_rows() != list(
                range(cfg.rows)) else None
            placement = Placement.modulo(program.n_out, cfg.rows, among=among)
        none = np.zeros((program.n_out, program.config.rows), dtype=bool)
        return np.argsort(placement.row_of, kind="stable"), placement.row_of, (none,) * 3

    def _costs(self, program, X):
        cfg = program.config
        padded = np.zeros((program.n_in, cfg.max_tokens), dtype=np.int64)
        padded[:, :program.tokens] = X
        live = (padded != 0).reshape(program.n_in, cfg.n_tok // cfg.lanes, cfg.lanes, cfg.cols)
        per_feature = np.maximum(1, live.sum(axis=1).max(axis=1))      # [feature, column]
        per_row = np.zeros((cfg.rows, cfg.cols), dtype=np.int64)
        np.add.at(per_row, np.arange(program.n_in) % cfg.rows, per_feature)
        costs = np.repeat(per_row.max(axis=1)[:, None], program.n_out, axis=1)
        if program.keep is not None:
            # a CR_DELTA's owner row gates its AXPYs by keep, every weight present or not
            order, owners, _ = self._schedule(program)
            owned = owners[order]
            gates = masking.gates(program, program.keep)[order]
            masks = (masking.mask_words(program, program.keep) >= 0).sum(axis=2)[order]
            blocks = program.x_blocks(X)
            every = np.ones((program.n_out, program.n_in), dtype=bool)
            for r in range(cfg.rows):
                mine = owned == r
                feats = np.flatnonzero(program.in_placement.row_of == r)
                gated = CycleModel._masked_costs(program, blocks, r, feats, every, ~every, mine,
                                                 gates=gates, masks=masks)
                costs[r][mine] = gated[mine].max(axis=1)
        return costs


def predict_dense_cycles(program, X=None):
    """The modelled compute-phase cycles of ``program``'s GEMM with every weight present (what
    :func:`predict_cycles` gives for ``compile_gemm`` of the same shape with no zero weight and
    ``program``'s output placement), from ``program`` alone: no second compile."""
    return _EveryWeight(program, X).cycles


def predict_unmasked_cycles(program, X=None):
    """The modelled compute-phase cycles of a masked ``program`` run without its mask (every
    token of every streamed output: a dense layer's weight-gradient pass on the same deltas),
    from ``program`` alone."""
    return CycleModel(program, X, unmasked=True).cycles


def predict_load_cycles(program, X=None):
    """The modelled cycles of ``program``'s load exchange (:meth:`~fabric.program.GemmProgram.
    load_streams`; :func:`~fabric.loads.load_cycles`: each row's stream a wavelet a cycle, each
    core writing a word a cycle, two for a LOAD pair, behind its command FIFO)."""
    return loads.load_cycles(program)


def predict_read_cycles(program):
    """The modelled cycles of ``program``'s read exchanges (:meth:`~fabric.program.GemmProgram.
    read_streams`; 0 for a raw program, whose totals leave during the compute phase). Each
    exchange (a READ group) ends when its busiest core has sent its ``w`` words, a word every
    ``READ_WORD`` cycles, and the last has crossed the rows below it, or when the outlets have
    taken the words of every row of the group, one a cycle, and the last has crossed the rows
    below the lowest reading row, whichever is later. 0 for a raw or act program: its results
    leave during the compute phase."""
    if program.streamed:
        return 0
    cfg = program.config
    slots = program.out_placement.slots_per_row()
    active = program.active_tokens().tolist()
    total = 0
    for rows in program.read_groups():
        ends = []
        for c in range(cfg.cols):
            # column c's READ enters behind the commands of the columns before it
            words = [int(slots[r]) * active[c] for r in rows]
            if not any(words):
                continue
            start = 2 * READ_HOP * (c + 1)
            # the busiest core's last word crosses the rows below it; the outlet's last word,
            # the rows below the lowest reading one
            core = max(READ_WORD * w + READ_HOP * (cfg.rows - r) for r, w in zip(rows, words))
            core += start + READ_CORE_EXTRA
            outlet = sum(words) + start + READ_OUTLET_EXTRA
            ends.append(max(core, outlet + READ_HOP * (cfg.rows - 1 - max(rows))))
        total += max(ends, default=0)
    return total


def predict_io_cycles(program, X=None):
    """:func:`predict_load_cycles` plus :func:`predict_read_cycles`: the cycles ``program``
    spends moving activations and results through the edges."""
    return predict_load_cycles(program, X) + predict_read_cycles(program)
