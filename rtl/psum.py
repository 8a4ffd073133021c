"""The partial-sum engine: what a core does with its accumulators after a carriage return."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .core_params import CoreParams
from .isa import core_strap_layout
from .wavelet import Wavelet

__all__ = ["PsumEngine"]


class PsumEngine(wiring.Component):
    """Reduces one retired accumulator buffer for output feature ``o`` (``docs/pe.md``).

    On ``start`` (taken while ``can_start``) it latches ``o`` and its role (owner row
    ``o % rows``, result slot ``o // rows``), then streams the tokens in order through two stages:
    ``read`` fetches ``ACC[t]``; ``add`` adds the psums it needs from the north and south
    FIFOs (saturating) and either sends the sum on ``psum_to_s`` / ``psum_to_n`` or, on the owner
    row, requantises it into ``Y[slot][t]`` (or, for a ``CR_OUT``, sends it raw on ``out``),
    zeroing ``ACC[t]``. The next token is read while
    one is added, unless the add waits (its data must hold in the read port).

    Latency: 1 cycle from ``start`` to the first read. Throughput: one token per cycle while
    its inputs and the output are ready: ``n_tok`` cycles an output when the next one is
    waiting (its first read overlaps the last add), ``n_tok + 2`` from idle. The core checks a CR
    before starting the engine (a slot outside ``Y`` is an error there), and starts it only while
    ``busy`` is low.

    Members
    -------
    start : In(1)
        Begin a reduction (ignored while ``busy``).
    o : In(28)
        The output feature of that reduction.
    raw : In(1)
        With ``start``: the owner row sends its totals (32-bit, not requantised) on the
        ``out`` color instead of writing ``Y`` (``CR_OUT``).
    busy : Out(1)
        A reduction is in progress.
    can_start : Out(1)
        ``start`` is taken this cycle: idle, or adding the last token of an output (the next
        output's first read then overlaps that add).
    done : Out(1)
        The last token of an output is added this cycle.
    read_next : Out(1)
        This cycle's ``acc_read`` is token 0 of the next output (its buffer, not this one's).
    acc_read, read_bank, read_index : Out
        Read the retired buffer's accumulator of token ``read_index * lanes + read_bank``.
    acc_data : In(fmt.acc_shape)
        The accumulator of the token in ``add`` (bank ``clear_bank``): read the cycle before
        and held by its bank's read port until that bank is read again.
    acc_clear, clear_bank, clear_index : Out
        Write zero to the accumulator of the token in ``add`` as it completes.
    psum_n, psum_s : In(stream.Signature(32))
        Psums from the north and the south neighbour, in token order.
    out : Out(stream.Signature(Wavelet))
        Psums to the neighbour towards the owner row.
    y_write, y_address, y_value : Out
        Write a requantised result into ``Y``.
    overflow : Out(1)
        A sum or a requantisation saturated this cycle.
    strap : In(core_strap_layout(rows))
        Only with ``straps=True``: the core's colors and row (see :class:`~rtl.core.Core`).
    """

    def __init__(self, params, *, straps=False):
        if not isinstance(params, CoreParams):
            raise TypeError(f"params must be a CoreParams, not {params!r}")
        self.params = params
        self.straps = bool(straps)
        fmt = params.fmt
        straps = {"strap": In(core_strap_layout(params.rows))} if self.straps else {}
        super().__init__({
            **straps,
            "start":     In(1),
            "o":         In(28),
            "raw":       In(1),
            "busy":      Out(1),
            "can_start": Out(1),
            "done":      Out(1),
            "read_next": Out(1),
            "acc_read":    Out(1),
            "read_bank":   Out(range(params.lanes)),
            "read_index":  Out(range(params.tpb)),
            "acc_data":    In(fmt.acc_shape),
            "acc_clear":   Out(1),
            "clear_bank":  Out(range(params.lanes)),
            "clear_index": Out(range(params.tpb)),
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

        o = Signal(28)
        slot = Signal(28)
        need_n = Signal()
        need_s = Signal()
        is_owner = Signal()
        raw = Signal()
        towards_s = Signal()
        read_token = Signal(range(p.n_tok + 1))      # next token to read (n_tok: all read)
        add_token = Signal(range(p.n_tok))           # token in the add stage
        add_valid = Signal()

        read_from = Mux(self.read_next, 0, read_token)       # token 0 of the next output
        m.d.comb += [
            self.read_bank.eq(read_from % p.lanes),
            self.read_index.eq(read_from // p.lanes),
            self.clear_bank.eq(add_token % p.lanes),
            self.clear_index.eq(add_token // p.lanes),
        ]

        from_n = fmt.acc_from_bits(self.psum_n.payload)
        from_s = fmt.acc_from_bits(self.psum_s.payload)
        s1, over1 = fmt.accumulate(self.acc_data, Mux(need_n, from_n, 0))
        s2, over2 = fmt.accumulate(s1, Mux(need_s, from_s, 0))
        result, over_q = fmt.requantise(s2)
        inputs_ready = (~need_n | self.psum_n.valid) & (~need_s | self.psum_s.valid)
        fire = Signal()

        sent = data.View(Wavelet, self.out.payload)
        m.d.comb += [
            sent.data.eq(s2.as_signed()),
            sent.color.eq(Mux(is_owner, colors.out,
                              Mux(towards_s, colors.psum_to_s, colors.psum_to_n))),
            sent.ctrl.eq(0),
            self.y_value.eq(result),
            self.y_address.eq(slot * p.n_tok + add_token),
        ]

        def take_next():
            """Latch the next output and its role (owner row, result slot)."""
            owner = self.o % p.rows
            m.d.sync += [
                o.eq(self.o), raw.eq(self.raw), slot.eq(self.o // p.rows),
                need_n.eq((row > 0) & (row <= owner)),
                need_s.eq((row < p.rows - 1) & (row >= owner)),
                is_owner.eq(owner == row),
                towards_s.eq(row < owner),
            ]

        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += self.can_start.eq(1)
                with m.If(self.start):
                    take_next()
                    m.d.sync += [read_token.eq(0), add_valid.eq(0)]
                    m.next = "RUN"
            with m.State("RUN"):
                m.d.comb += [
                    self.busy.eq(1),
                    self.out.valid.eq(add_valid & inputs_ready & (~is_owner | raw)),
                    fire.eq(add_valid & inputs_ready & ((is_owner & ~raw) | self.out.ready)),
                ]
                with m.If(fire):
                    m.d.comb += [
                        self.psum_n.ready.eq(need_n),
                        self.psum_s.ready.eq(need_s),
                        self.acc_clear.eq(1),
                        self.y_write.eq(is_owner & ~raw),
                        self.overflow.eq(over1 | over2 | (is_owner & ~raw & over_q)),
                    ]
                read = (read_token < p.n_tok) & (~add_valid | fire)
                last = fire & (read_token == p.n_tok)
                m.d.comb += [self.done.eq(last), self.can_start.eq(last)]
                with m.If(last & self.start):
                    # the next output's first read overlaps this output's last add
                    take_next()
                    m.d.comb += [self.acc_read.eq(1), self.read_next.eq(1)]
                    m.d.sync += [read_token.eq(1), add_token.eq(0), add_valid.eq(1)]
                with m.Elif(read):
                    m.d.comb += self.acc_read.eq(1)
                    m.d.sync += [read_token.eq(read_token + 1), add_token.eq(read_token),
                                 add_valid.eq(1)]
                with m.Elif(fire):
                    m.d.sync += add_valid.eq(0)
                    with m.If(read_token == p.n_tok):
                        m.next = "IDLE"
        return m
