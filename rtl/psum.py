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

    It takes a carriage return from ``job`` (while idle, or while adding the last token of
    the output before), with its role already split out (owner row ``o % rows``, result slot
    ``o // rows``: :func:`~rtl.isa.cr_job_layout`) and the gate its buffer was filled under
    (:func:`~rtl.isa.engine_job_layout`), then streams the gated tokens in order (the next one
    found by a priority encoder over the gate bits not yet read) through two stages: ``read``
    fetches ``ACC[t]``; ``add`` adds the psums it needs from the north and south FIFOs
    (saturating: from the north on the rows ``0 < row <= owner``, from the south on the
    rows ``owner <= row < rows - 1``, unless the job's ``quiet_n`` / ``quiet_s`` says none
    come) and either sends the sum on ``psum_to_s`` / ``psum_to_n`` or, on the owner row,
    requantises it into ``Y[slot][t]`` (or, for a ``CR_OUT``, sends it raw on ``out``).
    ``ACC[t]`` is zero when the buffer comes round again without a clear from here
    (:class:`~rtl.core_acc.AccBuffers`). The next token is read while one is added, unless the
    add waits (its data must hold in the read port). Where the sums go (the ``out`` color or a
    neighbour's) is a register set with the job.

    Latency: 1 cycle from a job to the first read. Throughput: one token per cycle while its
    inputs and the output are ready: ``g`` cycles an output of ``g`` gated tokens when the next
    one is waiting (its first read overlaps the last add), ``g + 2`` from idle; an output whose
    gate is empty takes one cycle (two from idle). The core checks a CR
    before queueing it (a slot outside ``Y`` is an error there).

    Members
    -------
    job : In(stream.Signature(engine_job_layout(rows, n_out, n_tok)))
        The next reduction and its gate (``ready``: it is taken this cycle).
    acc : Out(AccDrainSignature(params))
        To the retired accumulator buffer.
    psum_n, psum_s : In(stream.Signature(32))
        Psums from the north and the south neighbour, in token order.
    out : Out(stream.Signature(Wavelet))
        Psums to the neighbour towards the owner row.
    y_write, y_address, y_value : Out
        Write a requantised result into ``Y``, the cycle after its add.
    overflow : Out(1)
        A sum overflowed this cycle (saturated; in bf16, became ``±inf`` or NaN from a finite
        value), or the requantisation written into ``Y`` now did.
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
                                                              params.n_tok))),
            "acc":       Out(AccDrainSignature(params)),
            "psum_n":    In(stream.Signature(32)),
            "psum_s":    In(stream.Signature(32)),
            "out":       Out(stream.Signature(Wavelet)),
            "y_write":   Out(1),
            "y_address": Out(range(params.n_out * params.n_tok)),
            "y_value":   Out(fmt.operand_shape),
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
        color = Signal(COLOR_BITS)                   # where the sums go: out, south or north
        left = Signal(p.n_tok)                       # gated tokens of this output not yet read
        add_token = Signal(range(p.n_tok))           # token in the add stage
        add_valid = Signal()

        # Which word a read would fetch, from registers alone: every token of this output read,
        # the only read left is the first of the next (so the buffers can present the address
        # before ``read``, which waits for the output, is known).
        m.d.comb += acc.read_next.eq(left == 0)
        next_gate = job.payload.gate
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
        # The owner's sum is requantised into Y a cycle after its add (a register stage off the
        # adders' path; a READ waits for the engine to be idle, which it is by then).
        y_pending, y_sum = Signal(), Signal(fmt.acc_shape)
        y_address = Signal.like(self.y_address)
        result, over_q = fmt.requantise(y_sum, m=m)
        inputs_ready = (~need_n | self.psum_n.valid) & (~need_s | self.psum_s.valid)
        fire = Signal()

        sent = data.View(Wavelet, self.out.payload)
        m.d.comb += [
            sent.data.eq(s2.as_signed()),
            sent.color.eq(color),
            sent.ctrl.eq(0),
            self.y_write.eq(y_pending), self.y_value.eq(result), self.y_address.eq(y_address),
        ]
        m.d.sync += y_pending.eq(0)
        with m.If(y_pending & over_q):
            m.d.comb += self.overflow.eq(1)
        start = job.valid & job.ready

        def take_next():
            """Latch the next output and its role (owner row, result slot)."""
            owner = job.payload.cr.owner
            m.d.sync += [
                raw.eq(job.payload.cr.raw), slot.eq(job.payload.cr.slot),
                need_n.eq((row > 0) & (row <= owner) & ~job.payload.cr.quiet_n),
                need_s.eq((row < p.rows - 1) & (row >= owner) & ~job.payload.cr.quiet_s),
                is_owner.eq(owner == row),
                color.eq(Mux(owner == row, colors.out,
                             Mux(row < owner, colors.psum_to_s, colors.psum_to_n))),
            ]

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
                    self.out.valid.eq(add_valid & inputs_ready & (~is_owner | raw)),
                    fire.eq(add_valid & inputs_ready & ((is_owner & ~raw) | self.out.ready)),
                ]
                with m.If(fire):
                    m.d.comb += [
                        self.psum_n.ready.eq(need_n),
                        self.psum_s.ready.eq(need_s),
                    ]
                    with m.If(over1 | over2):
                        m.d.comb += self.overflow.eq(1)
                    with m.If(is_owner & ~raw):
                        m.d.sync += [y_pending.eq(1), y_sum.eq(s2),
                                     y_address.eq(Cat(add_token, slot))]
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
