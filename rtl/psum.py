"""The partial-sum engine: what a core does with its accumulators after a carriage return."""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .core_params import CoreParams
from .isa import core_strap_layout, engine_job_layout
from .wavelet import COLOR_BITS, Wavelet

__all__ = ["AccDrainSignature", "PsumEngine"]


def _lowest(m, bits, name):
    """The index of the lowest set bit of ``bits`` (0 when none is set): a priority encoder."""
    index = Signal(range(max(2, len(bits))), name=f"{name}_lowest")
    for i in reversed(range(len(bits))):
        with m.If(bits[i]):
            m.d.comb += index.eq(i)
    return index


class AccDrainSignature(wiring.Signature):
    """The partial-sum engine to the accumulator buffers (the engine's side).

    Members
    -------
    busy : Out(1)
        A reduction is in progress.
    done : Out(1)
        The last token of an output is added this cycle: its buffer is free after it.
    read, read_bank, read_index : Out
        Read the accumulator of token ``read_index * lanes + read_bank`` of the buffer being
        reduced or, with ``read_next``, of the next one (token 0 of the next output).
    read_next : Out(1)
        Valid in every cycle, like ``read_bank`` and ``read_index``: from registers only, so
        the buffers can present the word before ``read`` (which waits for the output) is known.
    add_bank : Out(range(lanes))
        The bank of the token in ``add``.
    data : In(acc_shape)
        The accumulator of the token in ``add`` (bank ``add_bank``): read the cycle before
        and held until that bank is read again. The buffers need no clearing: a buffer's words
        read 0 from when it comes round again until a MAC writes them.
    """

    def __init__(self, params):
        super().__init__({
            "busy":        Out(1),
            "done":        Out(1),
            "read":        Out(1),
            "read_next":   Out(1),
            "read_bank":   Out(range(params.lanes)),
            "read_index":  Out(range(params.tpb)),
            "add_bank":    Out(range(params.lanes)),
            "data":        In(params.fmt.acc_shape),
        })


class PsumEngine(wiring.Component):
    """Reduces one retired accumulator buffer for output feature ``o`` (``docs/pe.md``).

    It takes a carriage return from ``job`` (while idle, or while adding the last token of the
    output before), with its role already split out (owner row ``o % rows``, result slot ``o //
    rows``: :func:`~rtl.isa.cr_job_layout`) and the gate its buffer was filled under
    (:func:`~rtl.isa.engine_job_layout`), then streams the gated tokens in order (the next one found
    by a priority encoder over the gate bits not yet read) through two stages: ``read`` fetches
    ``ACC[t]``; ``add`` adds the psums it needs from the north and south FIFOs (saturating: from the
    north on the rows ``0 < row <= owner``, from the south on the rows ``owner <= row < rows - 1``,
    unless the job's ``quiet_n`` / ``quiet_s`` says none come) and either sends the sum on
    ``psum_to_s`` / ``psum_to_n`` or, on the owner row, hands it to a third stage, ``result``, which
    requantises it into ``Y[slot][t]`` (for a ``CR_ACT``: its ReLU into ``X[slot][t]`` and its
    nonzero bit, through the lanes, in the cycle ``out`` takes the same word; for a ``CR_DELTA`` the
    requantised word where the job's gate is set and 0 where it is clear, visiting every active
    token, ``open_tokens``, not only the gated ones), or, for a ``CR_OUT``, sends it raw on ``out``.
    ``ACC[t]`` is zero when the buffer comes round again without a clear from here
    (:class:`~rtl.core_acc.AccBuffers`). The next token is read while one is added, unless the add
    waits (its data must hold in the read port; an add into ``result`` waits while a CR_ACT's word
    there waits for ``out``, and so does an add that sends). Where the sums go (the ``out`` color or
    a neighbour's) is a register set with the job.

    Latency: 1 cycle from a job to the first read; a result is written (or sent) the cycle
    after its add. Throughput: one token per cycle while its inputs and the output are ready:
    ``g`` cycles an output of ``g`` gated tokens when the next one is waiting (its first read
    overlaps the last add), ``g + 2`` from idle; an output whose gate is empty takes one cycle
    (two from idle). The core checks a CR before queueing it (a slot outside ``Y``, a
    CR_ACT's or CR_DELTA's outside ``X``, is an error there).

    Members
    -------
    job : In(stream.Signature(engine_job_layout(rows, n_out, n_feat, n_tok)))
        The next reduction and its gate (``ready``: it is taken this cycle).
    acc : Out(AccDrainSignature(params))
        To the retired accumulator buffer.
    psum_n, psum_s : In(stream.Signature(32))
        Psums from the north and the south neighbour, in token order.
    out : Out(stream.Signature(Wavelet))
        Psums to the neighbour towards the owner row; a CR_OUT's totals and a CR_ACT's
        results on the ``out`` color.
    y_write, y_address, y_value : Out
        Write a requantised result into ``Y``, the cycle after its add.
    x_write, x_bank, x_slot, x_index, x_value : Out
        Write a CR_ACT's (CR_DELTA's) result into ``X[x_slot]`` of bank ``x_bank`` at ``x_index``
        (and its nonzero bit), in the cycle ``out`` takes it (``x_pending`` and ``out.ready``).
    x_pending : Out(1)
        A CR_ACT's (CR_DELTA's) result waits in the result stage for ``out``: ``X`` is not
        written yet.
    open_tokens : In(n_tok)
        The core's active tokens (a bit each): what the owner of a CR_DELTA visits (the
        dispatcher holds a TOKENS while the engine is busy, so they are the job's).
    overflow : Out(1)
        A sum overflowed this cycle (saturated; in bf16, became ``±inf`` or NaN from a finite
        value), or the requantisation in the result stage did.
    strap : In(core_strap_layout(rows, cols))
        Only with ``straps=True``: the core's colors, row and column (see :class:`~rtl.core.Core`).
    """

    def __init__(self, params, *, straps=False):
        if not isinstance(params, CoreParams):
            raise TypeError(f"params must be a CoreParams, not {params!r}")
        self.params = params
        self.straps = bool(straps)
        fmt = params.fmt
        straps = {"strap": In(core_strap_layout(params.rows, params.cols))} if self.straps else {}
        super().__init__({
            **straps,
            "job":       In(stream.Signature(engine_job_layout(params.rows, params.n_out,
                                                              params.n_feat, params.n_tok))),
            "acc":       Out(AccDrainSignature(params)),
            "psum_n":    In(stream.Signature(32)),
            "psum_s":    In(stream.Signature(32)),
            "out":       Out(stream.Signature(Wavelet)),
            "y_write":   Out(1),
            "y_address": Out(range(params.n_out * params.n_tok)),
            "y_value":   Out(fmt.operand_shape),
            "x_write":   Out(1),
            "x_bank":    Out(range(params.lanes)),
            "x_slot":    Out(range(params.n_feat)),
            "x_index":   Out(range(params.tpb)),
            "x_value":   Out(fmt.operand_shape),
            "x_pending": Out(1),
            "open_tokens": In(params.n_tok),
            "overflow":  Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        p, fmt = self.params, self.params.fmt
        colors, row = (self.strap, self.strap.row) if self.straps else (p.colors, p.row)
        acc, job = self.acc, self.job
        log_lanes = p.lanes.bit_length() - 1          # lanes is a power of two

        slot = Signal.like(job.payload.cr.slot)
        need_n = Signal()
        need_s = Signal()
        is_owner = Signal()
        raw = Signal()
        act = Signal()
        delta = Signal()                             # with ``act``: a CR_DELTA
        color = Signal(COLOR_BITS)                   # where the sums go: out, south or north
        left = Signal(p.n_tok)                       # gated tokens of this output not yet read
        add_token = Signal(range(p.n_tok))           # token in the add stage
        add_valid = Signal()

        # Which word a read would fetch, from registers alone: every token of this output read,
        # the only read left is the first of the next (so the buffers can present the address
        # before ``read``, which waits for the output, is known).
        m.d.comb += acc.read_next.eq(left == 0)
        # the tokens the next output visits: its gate, or a CR_DELTA owner's every active token
        next_gate = Mux(job.payload.cr.delta, self.open_tokens, job.payload.gate)
        keep = Signal(p.n_tok)                       # a CR_DELTA keeps its result where set
        read_from = Mux(acc.read_next, _lowest(m, next_gate, "next"), _lowest(m, left, "left"))
        m.d.comb += [
            acc.read_bank.eq(read_from[:log_lanes]),
            acc.read_index.eq(read_from >> log_lanes),
            acc.add_bank.eq(add_token[:log_lanes]),
        ]

        from_n = fmt.acc_from_bits(self.psum_n.payload)
        from_s = fmt.acc_from_bits(self.psum_s.payload)
        # the first sum through a signal of its own: one adder feeding the next, not its whole
        # expression copied into each use (what Amaranth's back ends would make of it)
        s1, over1 = Signal(fmt.acc_shape), Signal()
        m.d.comb += Cat(s1, over1).eq(Cat(*fmt.accumulate(acc.data, Mux(need_n, from_n, 0),
                                                          m=m)))
        s2, over2 = fmt.accumulate(s1, Mux(need_s, from_s, 0), m=m)
        inputs_ready = (~need_n | self.psum_n.valid) & (~need_s | self.psum_s.valid)
        fire = Signal()
        # the result stage: its word for ``out`` (a CR_ACT's) goes before the add stage's
        result_free, result_word = self._result(m, fire & is_owner & ~raw, s2, add_token, slot,
                                                act, delta, keep.bit_select(add_token, 1))
        x_out = self.x_pending

        sent = data.View(Wavelet, self.out.payload)
        m.d.comb += [
            sent.data.eq(Mux(x_out, fmt.operand_word(result_word), s2.as_signed())),
            sent.color.eq(Mux(x_out, colors.out, color)),
            sent.ctrl.eq(0),
        ]
        start = job.valid & job.ready

        def take_next():
            """Latch the next output and its role (owner row, result slot)."""
            owner = job.payload.cr.owner
            m.d.sync += [
                raw.eq(job.payload.cr.raw), act.eq(job.payload.cr.act),
                delta.eq(job.payload.cr.delta), keep.eq(job.payload.gate),
                slot.eq(job.payload.cr.slot),
                need_n.eq((row > 0) & (row <= owner) & ~job.payload.cr.quiet_n),
                need_s.eq((row < p.rows - 1) & (row >= owner) & ~job.payload.cr.quiet_s),
                is_owner.eq(owner == row),
                color.eq(Mux(owner == row, colors.out,
                             Mux(row < owner, colors.psum_to_s, colors.psum_to_n))),
            ]

        sends = add_valid & inputs_ready & (~is_owner | raw)
        m.d.comb += self.out.valid.eq(x_out | sends)
        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += job.ready.eq(1)
                with m.If(start):
                    take_next()
                    m.d.sync += [left.eq(next_gate), add_valid.eq(0)]
                    m.next = "RUN"
            with m.State("RUN"):
                m.d.comb += [
                    acc.busy.eq(1),
                    fire.eq(add_valid & inputs_ready
                            & Mux(is_owner & ~raw, result_free, ~x_out & self.out.ready)),
                ]
                with m.If(fire):
                    m.d.comb += [
                        self.psum_n.ready.eq(need_n),
                        self.psum_s.ready.eq(need_s),
                    ]
                    with m.If(over1 | over2):
                        m.d.comb += self.overflow.eq(1)
                stage_free = ~add_valid | fire
                read = (left != 0) & stage_free
                last = (left == 0) & stage_free      # every token read, the last one added now
                m.d.comb += [acc.done.eq(last), job.ready.eq(last)]
                with m.If(start):
                    # the next output's first read overlaps this output's last add; an output
                    # whose gate is empty reads nothing and is done in the next cycle
                    take_next()
                    m.d.comb += acc.read.eq(next_gate != 0)
                    m.d.sync += [left.eq(next_gate & (next_gate - 1)), add_token.eq(read_from),
                                 add_valid.eq(next_gate != 0)]
                with m.Elif(read):
                    m.d.comb += acc.read.eq(1)
                    m.d.sync += [left.eq(left & (left - 1)), add_token.eq(read_from),
                                 add_valid.eq(1)]
                with m.Elif(last):
                    m.d.sync += add_valid.eq(0)
                    m.next = "IDLE"
        return m

    def _result(self, m, load, total, token, slot, act, delta, kept):
        """The owner's result stage, the cycle after the add (a register stage off the adders'
        path): ``total`` requantised into ``Y``, or for a CR_ACT its ReLU into ``X`` as
        ``out`` takes it (for a CR_DELTA the requantised word where ``kept``, else 0).
        ``load``: the add stage hands it ``total`` (of ``token``, ``slot``, ``act``, ``delta``,
        ``kept``) now. Returns whether the stage takes a word this cycle (it is empty, holds a
        ``Y`` word, or ``out`` takes its CR_ACT / CR_DELTA word) and that word."""
        p, fmt = self.params, self.params.fmt
        log_tok, log_lanes = p.n_tok.bit_length() - 1, p.lanes.bit_length() - 1
        pending, is_act, is_delta, is_kept = Signal(), Signal(), Signal(), Signal()
        held = Signal(fmt.acc_shape)
        at = Signal(log_tok + len(slot))             # token, then slot: Y's address
        result, over = fmt.requantise(held, m=m)
        word = Signal(fmt.operand_shape)
        # the overflow flag below is the requantiser's, whether the word is kept or not
        m.d.comb += word.eq(Mux(is_delta, Mux(is_kept, result, 0), fmt.relu(result)))
        free = ~self.x_pending | self.out.ready
        m.d.comb += [
            self.y_write.eq(pending & ~is_act), self.y_value.eq(result),
            self.y_address.eq(at),
            self.x_pending.eq(pending & is_act), self.x_write.eq(self.x_pending & self.out.ready),
            self.x_bank.eq(at[:log_lanes]), self.x_index.eq(at[log_lanes:log_tok]),
            self.x_slot.eq(at[log_tok:]), self.x_value.eq(word),
        ]
        with m.If(pending & over):
            m.d.comb += self.overflow.eq(1)
        with m.If(free):
            m.d.sync += pending.eq(0)
        with m.If(load):
            m.d.sync += [pending.eq(1), held.eq(total), is_act.eq(act), is_delta.eq(delta),
                         is_kept.eq(kept), at.eq(Cat(token[:log_tok], slot))]
        return free, word
