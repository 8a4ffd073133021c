"""The partial-sum engine: what a core does with its accumulators after a carriage return."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .core_params import CoreParams
from .wavelet import Wavelet

__all__ = ["PsumEngine"]


class PsumEngine(wiring.Component):
    """Reduces one retired accumulator buffer for output feature ``o`` (``docs/pe.md``).

    On ``start`` it latches ``o`` and the retired buffer, spends one cycle working out its role
    (owner row ``o % rows``, result slot ``o // rows``), then for each token ``t`` in order:
    reads ``ACC[t]`` (one cycle), adds the psums it needs from the north and south FIFOs
    (saturating), and either sends the sum on ``psum_to_s`` / ``psum_to_n`` or, on the owner
    row, requantises it into ``Y[slot][t]``; ``ACC[t]`` is then zeroed.

    Latency: 2 cycles from ``start`` to the first read. Throughput: one token every 2 cycles
    while its inputs and the output are ready. The core checks a CR before starting the engine
    (a slot outside ``Y`` is an error there), and starts it only while ``busy`` is low.

    Members
    -------
    start : In(1)
        Begin a reduction (ignored while ``busy``).
    o : In(28)
        The output feature of that reduction.
    busy : Out(1)
        A reduction is in progress.
    acc_read, acc_bank, acc_index : Out
        Read the retired buffer's accumulator of token ``acc_index * lanes + acc_bank``.
    acc_data : In(fmt.acc_shape)
        That accumulator, the cycle after the read (held until the next read).
    acc_clear : Out(1)
        Write zero to the accumulator at ``acc_bank`` / ``acc_index``.
    psum_n, psum_s : In(stream.Signature(32))
        Psums from the north and the south neighbour, in token order.
    out : Out(stream.Signature(Wavelet))
        Psums to the neighbour towards the owner row.
    y_write, y_address, y_value : Out
        Write a requantised result into ``Y``.
    overflow : Out(1)
        A sum or a requantisation saturated this cycle.
    """

    def __init__(self, params):
        if not isinstance(params, CoreParams):
            raise TypeError(f"params must be a CoreParams, not {params!r}")
        self.params = params
        fmt = params.fmt
        super().__init__({
            "start":     In(1),
            "o":         In(28),
            "busy":      Out(1),
            "acc_read":  Out(1),
            "acc_bank":  Out(range(params.lanes)),
            "acc_index": Out(range(params.tpb)),
            "acc_data":  In(fmt.acc_shape),
            "acc_clear": Out(1),
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
        colors = p.colors

        o = Signal(28)
        owner_row = Signal(range(p.rows))
        slot = Signal(28)
        need_n = Signal()
        need_s = Signal()
        is_owner = Signal()
        towards_s = Signal()
        token = Signal(range(p.n_tok))

        m.d.comb += [
            self.acc_bank.eq(token % p.lanes),
            self.acc_index.eq(token // p.lanes),
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
            sent.color.eq(Mux(towards_s, colors.psum_to_s, colors.psum_to_n)),
            sent.ctrl.eq(0),
            self.y_value.eq(result),
            self.y_address.eq(slot * p.n_tok + token),
        ]

        with m.FSM():
            with m.State("IDLE"):
                with m.If(self.start):
                    m.d.sync += [o.eq(self.o), token.eq(0)]
                    m.next = "ROLE"
            with m.State("ROLE"):
                m.d.comb += self.busy.eq(1)
                owner = o % p.rows
                m.d.sync += [
                    owner_row.eq(owner),
                    slot.eq(o // p.rows),
                    need_n.eq((p.row > 0) & (p.row <= owner)),
                    need_s.eq((p.row < p.rows - 1) & (p.row >= owner)),
                    is_owner.eq(owner == p.row),
                    towards_s.eq(p.row < owner),
                ]
                m.next = "READ"
            with m.State("READ"):
                m.d.comb += [self.busy.eq(1), self.acc_read.eq(1)]
                m.next = "ADD"
            with m.State("ADD"):
                m.d.comb += [
                    self.busy.eq(1),
                    self.out.valid.eq(inputs_ready & ~is_owner),
                    fire.eq(inputs_ready & (is_owner | self.out.ready)),
                ]
                with m.If(fire):
                    m.d.comb += [
                        self.psum_n.ready.eq(need_n),
                        self.psum_s.ready.eq(need_s),
                        self.acc_clear.eq(1),
                        self.y_write.eq(is_owner),
                        self.overflow.eq(over1 | over2 | (is_owner & over_q)),
                    ]
                    m.d.sync += token.eq(token + 1)
                    with m.If(token == p.n_tok - 1):
                        m.next = "IDLE"
                    with m.Else():
                        m.next = "READ"
        return m
