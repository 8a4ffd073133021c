"""The core's dispatcher: runs the command FIFO's head, one command at a time."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from .core_input import COMMAND, SKIP_OP, command_held_layout, cr_ahead_layout
from .core_params import CoreParams
from .core_rows import RowSplit, below, next_word
from .isa import CR_O_BITS, MASK_CHUNK, AddrArg, CrArg, MaskArg, TokensArg, cr_job_layout
from .peek_fifo import PeekSignature
from .wavelet import ControlOp, ControlPayload

__all__ = ["Dispatcher"]

#: The opcodes that only take their cycle.
_PLAIN_OPS = (ControlOp.NOP, ControlOp.ADVANCE, ControlOp.RESET, ControlOp.TEARDOWN)


class Dispatcher(wiring.Component):
    """Runs the command FIFO's head (``docs/pe.md``, "Dispatch"): ADDR, LOAD, READ (started on
    the :class:`~rtl.core_read.ReadEngine`), AXPY (walked by the lanes), CR, MASK, TOKENS.

    A LOAD writes the operand at the load pointer (``ptr``: feature, then token) into its lane and
    moves the pointer on (past the inactive tokens of a row); after an ADDR with ``pairs`` it writes
    its two operands, a cycle each (``high`` in the second); once the partial-sum engine is not
    ``engine_busy`` (a CR_ACT's or CR_DELTA's engine writes ``X`` through the same port). ADDR sets
    the pointer (and ``pairs``). TOKENS sets the active tokens and the gate they open
    (``gate_open``), which every CR restores, once the engine is not ``engine_busy`` (a CR_DELTA's
    owner visits the active tokens). An AXPY takes ``max(1, max over lanes of the nonzero gated
    tokens left)`` cycles: ``walk`` while it runs, ``active`` from its second cycle; its first cycle
    waits while an earlier CR_ACT or CR_DELTA still writes its slot (``x_hazard``). A READ waits
    until the MACs and the partial-sum engine are idle, then starts the READ engine and waits while
    the engine is ``reader_active``. A CR (CR_OUT, CR_ACT, CR_DELTA) waits while the buffers are
    ``acc_full``, then retires the active buffer (``retire``, with its job from the CR's output
    feature); a CR with ``skip`` (the sorter's :data:`~rtl.core_input.SKIP_OP`) only resets the gate
    bits. A CR right behind an AXPY (the sorter's ``next``) rides on the AXPY's last cycle: both
    leave the FIFO at once (``take2``). A MASK of a chunk past ``n_tok`` and an unknown opcode (the
    sorter's :data:`~rtl.core_input.DROPPED_OP` too) are popped as an error.

    Latency: combinational from the head (its ``held`` part from flip-flops) to ``take``, the
    lanes' controls and the counts; ``ptr`` and ``active`` are registers.

    Parameters
    ----------
    params : CoreParams

    Members
    -------
    cmd : In(PeekSignature(COMMAND, cr_ahead_layout(rows, n_out, n_feat),
        command_held_layout(params)))
        The command FIFO's head and the entry behind it.
    reader_active : In(1)
        The READ engine runs a READ: nothing else is dispatched.
    start_read : Out(1)
        Start the READ at the head.
    acc_full : In(1)
        The :class:`~rtl.core_acc.AccBuffers`' ``full``.
    engine_busy : In(1)
        The partial-sum engine has work: a retired buffer waits for it or is being reduced (the
        buffers' ``pending``), or a CR_ACT's (CR_DELTA's) word waits for the output. A LOAD, a
        READ and a TOKENS wait for it.
    x_hazard : In(1)
        An earlier CR_ACT (CR_DELTA) still writes the slot of the AXPY at the head (the lanes' ``X``
        and masks): the AXPY waits.
    retire : Out(1)
    retire_job : Out(cr_job_layout(rows, n_out, n_feat))
        Hand the active buffer over, with this job (every field driven in every cycle).
    lanes_busy : In(1)
        Some lane's MAC pipeline holds an accumulation.
    lanes_done : In(lanes)
        Each lane has no gated nonzero token left in the AXPY's slot.
    lanes_nonzero : In(ArrayLayout(range(tpb + 1), lanes))
        Each lane's gated nonzero tokens in the slot.
    feature : Out(range(n_feat))
        The mask the lanes read: the AXPY's slot, or the LOAD pointer's feature.
    walk, active : Out(1)
        An AXPY's cycle; an AXPY is part-way through its tokens.
    load : Out(lanes)
        One-hot: the lane the LOAD at the head writes, at ``load_index``.
    load_index : Out(range(tpb))
    gate_write, gate_reset : Out(1)
        A MASK sets its chunk of gate bits; a CR taking effect, or TOKENS, sets the gate to
        ``gate_open``.
    high : Out(1)
        This cycle's LOAD writes the second word of a pair (the head's ``high`` half; a
        register, set by a pair's first cycle).
    gate_open : Out(n_tok)
        The active tokens, a bit per token (all after reset): what ``gate_reset`` loads. A
        register, but in TOKENS's own cycle its new value.
    tokens : Out(range(n_tok + 1))
        The active tokens' count (``n_tok`` after reset): LOADs and READs step over the rest
        (:func:`~rtl.core_rows.next_word`).
    busy, stall, error : Out(1)
        This cycle's ``busy_cycles``, ``stall_cycles`` and ``errors`` increments.
    macs_issued, macs_skipped_act : Out(range(n_tok + 1))
    macs_skipped_weight : Out(1)
        An AXPY's counts, in its first cycle.
    """

    def __init__(self, params):
        if not isinstance(params, CoreParams):
            raise TypeError(f"params must be a CoreParams, not {params!r}")
        self.params = params
        job = cr_job_layout(params.rows, params.n_out, params.n_feat)
        tok = range(params.n_tok + 1)
        super().__init__({
            "cmd":           In(PeekSignature(COMMAND, cr_ahead_layout(params.rows, params.n_out,
                                                                       params.n_feat),
                                              command_held_layout(params))),
            "reader_active": In(1),
            "start_read":    Out(1),
            "acc_full":      In(1),
            "engine_busy":   In(1),
            "x_hazard":      In(1),
            "retire":        Out(1),
            "retire_job":    Out(job),
            "lanes_busy":    In(1),
            "lanes_done":    In(params.lanes),
            "lanes_nonzero": In(data.ArrayLayout(range(params.tpb + 1), params.lanes)),
            "feature":       Out(range(params.n_feat)),
            "walk":          Out(1),
            "active":        Out(1),
            "load":          Out(params.lanes),
            "load_index":    Out(range(params.tpb)),
            "high":          Out(1),
            "gate_write":    Out(1),
            "gate_reset":    Out(1),
            "gate_open":     Out(params.n_tok),
            "tokens":        Out(range(params.n_tok + 1), init=params.n_tok),
            "busy":          Out(1),
            "stall":         Out(1),
            "error":         Out(1),
            "macs_issued":   Out(tok),
            "macs_skipped_act": Out(tok),
            "macs_skipped_weight": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        p, cmd = self.params, self.cmd
        log_tok, log_lanes = p.n_tok.bit_length() - 1, p.lanes.bit_length() - 1
        head, held = cmd.head, cmd.held       # ``held``: the head's class, slot, zero, in FFs
        arg, op = data.View(ControlPayload, head.data).arg, held.op.as_value()
        is_weight, is_data = held.is_weight, ~held.ctrl
        cr_arg = data.View(CrArg, arg)
        pop, load, retire = Signal(), Signal(), Signal()
        free = Signal()                    # a CR with ``skip`` takes effect: the gate alone
        opened = Signal()                  # TOKENS takes effect: a new gate for the CRs
        axpy_done = Signal()               # an AXPY's last cycle
        ptr = Signal(16)                   # the load pointer: feature, then token
        pairs = Signal()                   # the last ADDR's ``pairs``: a LOAD writes two words
        f_of_ptr, t_of_ptr = ptr >> log_tok, ptr[:log_tok]
        split = m.submodules.cr_split = RowSplit(p.rows, CR_O_BITS)         # the head's CR
        m.d.comb += [cmd.take.eq(pop), split.o.eq(cr_arg.o),
                     self.feature.eq(Mux(is_data & is_weight, held.slot, f_of_ptr)),
                     self.load_index.eq(t_of_ptr >> log_lanes)]
        m.d.comb += [self.load[b].eq(load & (t_of_ptr[:log_lanes] == b)) for b in range(p.lanes)]

        with m.If(self.reader_active):
            pass                                           # the READ engine's cycle
        with m.Elif(cmd.valid):
            # a foreign color, an AXPY of a slot outside X and a CR of a result slot outside
            # Y come as an unknown opcode (the sorter's ``DROPPED_OP``): dropped, an error
            with m.If(is_data & ~is_weight & self.engine_busy):                   # LOAD
                m.d.comb += self.stall.eq(1)                # X's write port is the engine's
            with m.Elif(is_data & ~is_weight):
                # a pair's first word, then (``high``) its second, in a cycle each
                m.d.comb += [pop.eq(~pairs | self.high), self.busy.eq(1)]
                m.d.sync += [ptr.eq(next_word(ptr, self.tokens, p.n_tok)),
                             self.high.eq(pairs & ~self.high)]
                with m.If(below(ptr, p.n_feat * p.n_tok)):
                    m.d.comb += load.eq(1)
                with m.Else():
                    m.d.comb += self.error.eq(1)
            with m.Elif(is_data & ~self.active & self.x_hazard):
                m.d.comb += self.stall.eq(1)        # an AXPY of a slot a CR_ACT/DELTA writes
            with m.Elif(is_data):                                                 # AXPY
                self._axpy(m, pop, axpy_done)
            with m.Elif(op == ControlOp.ADDR.value):
                m.d.comb += [pop.eq(1), self.busy.eq(1)]
                m.d.sync += [ptr.eq(data.View(AddrArg, arg).addr),
                             pairs.eq(data.View(AddrArg, arg).pairs)]
            with m.Elif(op == ControlOp.READ.value):
                with m.If(self.lanes_busy | self.engine_busy):
                    m.d.comb += self.stall.eq(1)
                with m.Else():
                    m.d.comb += [pop.eq(1), self.busy.eq(1), self.start_read.eq(1)]
            with m.Elif(op.matches(ControlOp.CR.value, ControlOp.CR_OUT.value,
                                   ControlOp.CR_ACT.value, ControlOp.CR_DELTA.value)):
                with m.If(self.acc_full):
                    m.d.comb += self.stall.eq(1)
                with m.Else():
                    # a CR's own cycle is a wait: the CR is free when it rides on an AXPY (below)
                    m.d.comb += [pop.eq(1), self.stall.eq(1), retire.eq(1)]
            with m.Elif(op == SKIP_OP):         # a CR with ``skip`` (the sorter's): no buffer
                m.d.comb += [pop.eq(1), self.stall.eq(1), free.eq(1)]
            with m.Elif(op == ControlOp.MASK.value):         # this column's (the sorter's)
                m.d.comb += [pop.eq(1), self.busy.eq(1)]
                with m.If(below(data.View(MaskArg, arg).chunk, -(-p.n_tok // MASK_CHUNK))):
                    m.d.comb += self.gate_write.eq(1)
                with m.Else():
                    m.d.comb += self.error.eq(1)
            with m.Elif(op == ControlOp.TOKENS.value):
                # waits for the engine: a CR_DELTA's owner visits the active tokens
                with m.If(self.engine_busy):
                    m.d.comb += self.stall.eq(1)
                with m.Elif(below(data.View(TokensArg, arg).count, p.n_tok + 1)):
                    m.d.comb += [pop.eq(1), self.busy.eq(1), opened.eq(1)]
                with m.Else():
                    m.d.comb += [pop.eq(1), self.busy.eq(1), self.error.eq(1)]
            with m.Elif(op.matches(*(o.value for o in _PLAIN_OPS))):
                m.d.comb += [pop.eq(1), self.busy.eq(1)]
            with m.Else():
                m.d.comb += [pop.eq(1), self.busy.eq(1), self.error.eq(1)]

        # A CR right behind an AXPY rides on the AXPY's last cycle (the input sorter worked out
        # whether it is one, and its job, as it was written). ``hand``: it hands its buffer
        # over, when one is free; ``free``: a CR with ``skip``, which hands none, never waits.
        nxt, job = cmd.next, self.retire_job
        fuse, fuse_free = Signal(), Signal()
        m.d.comb += [
            fuse.eq(axpy_done & cmd.next_valid & nxt.hand & ~self.acc_full),
            fuse_free.eq(axpy_done & cmd.next_valid & nxt.free),
            cmd.take2.eq(fuse | fuse_free),
            self.retire.eq(retire | fuse),
            self.gate_reset.eq(retire | fuse | free | fuse_free | opened),
            # every field, in every cycle (the CR queue takes it only with ``retire``)
            job.slot.eq(Mux(fuse, nxt.job.slot, split.slot)),
            job.owner.eq(Mux(fuse, nxt.job.owner, split.owner)),
            job.raw.eq(Mux(fuse, nxt.job.raw, op == ControlOp.CR_OUT.value)),
            # a CR_ACT or CR_DELTA of this row (the sorter holds another row's as a CR)
            job.act.eq(Mux(fuse, nxt.job.act, op.matches(ControlOp.CR_ACT.value,
                                                          ControlOp.CR_DELTA.value))),
            job.delta.eq(Mux(fuse, nxt.job.delta, op == ControlOp.CR_DELTA.value)),
            job.quiet_n.eq(Mux(fuse, nxt.job.quiet_n, cr_arg.quiet_n)),
            job.quiet_s.eq(Mux(fuse, nxt.job.quiet_s, cr_arg.quiet_s)),
        ]
        self._active_tokens(m, data.View(TokensArg, arg).count, opened)
        return m

    def _active_tokens(self, m, count, opened):
        """The active tokens: ``tokens`` and the gate they open, ``gate_open`` (every token's
        bit ``t < count``, worked out once, in TOKENS's cycle, and kept in flip-flops)."""
        n_tok = self.params.n_tok
        kept = Signal(n_tok, init=(1 << n_tok) - 1)
        fresh = Signal(n_tok)
        # t < count, against constants (no carry chain where the bound is a power of two)
        m.d.comb += [fresh[t].eq(~below(count, t + 1)) for t in range(n_tok)]
        m.d.comb += self.gate_open.eq(Mux(opened, fresh, kept))
        with m.If(opened):
            m.d.sync += [kept.eq(fresh), self.tokens.eq(count)]

    def _axpy(self, m, pop, axpy_done):
        """One cycle of an AXPY (of a slot in ``X`` or the ones slot: the sorter made any other
        an unknown opcode): every lane issues the lowest nonzero token it has left."""
        p, active = self.params, self.active
        m.d.comb += [self.busy.eq(1), self.walk.eq(1)]
        with m.If(self.lanes_done.all()):
            m.d.comb += [pop.eq(1), axpy_done.eq(1)]
            m.d.sync += active.eq(0)
        with m.Else():
            m.d.sync += active.eq(1)
        with m.If(~active):
            nonzero = sum(self.lanes_nonzero[b] for b in range(p.lanes))
            with m.If(~self.cmd.held.zero):
                m.d.comb += [self.macs_issued.eq(nonzero),
                             self.macs_skipped_act.eq(p.n_tok - nonzero)]
            with m.Else():
                m.d.comb += self.macs_skipped_weight.eq(1)
