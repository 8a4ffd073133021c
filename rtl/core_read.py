"""The core's READ engine: words of ``X``, ``Y`` or the counters, out on the ``out`` color."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .core_count import BANKED, CounterReadSignature
from .core_params import COUNTER_BASE, COUNTERS, Y_BASE, CoreParams
from .core_rows import below, next_word
from .isa import ReadArg
from .wavelet import COLOR_BITS, Wavelet

__all__ = ["ReadEngine", "SNAPSHOT"]

#: The counters a READ sees as they were when it started (the others are live).
SNAPSHOT = ("busy_cycles", "errors", "wavelets_out")


class ReadEngine(wiring.Component):
    """Runs one READ (``docs/pe.md``): ``len`` words from ``addr``, each sign-extended to 32
    bits (``X``, ``Y``) or as is (a counter; ``busy_cycles``, ``errors`` and ``wavelets_out``
    as they were at ``start``), sent on ``out`` with color ``out_color``.

    Per word: one cycle to read it (busy), then one or more to hand it to ``out`` (busy in the
    cycle it is taken, a stall while it waits). A READ of length 0 does nothing. Bad input: an
    address outside the map reads 0 and raises ``error`` as its word is taken.

    The three counters of :data:`SNAPSHOT` change while a READ runs only by what it adds itself
    (its start cycle and two cycles a word are busy, a wavelet out a word, an error a bad word:
    the core is otherwise idle), so the engine counts its words and bad words and takes them off
    the counter it reads (``count.less``) instead of keeping copies of the three at ``start``.

    Members
    -------
    start, arg : In
        Begin the READ ``arg`` (:class:`~rtl.isa.ReadArg`); only while not ``active``.
    active : Out(1)
        A READ is running (the dispatcher waits for it).
    count : Out(CounterReadSignature())
        To the :class:`~rtl.core_count.CounterBank`: a counter as it is now, less this READ's
        own increments so far for the three it reports as they were at ``start``.
    overflow : In(1)
        The ``overflow`` counter (a flag).
    x_read, x_address : Out
        Fetch ``X`` word ``x_address`` of bank ``b`` (bit ``b`` of ``x_read``).
    x_data : In(ArrayLayout(operand_shape, lanes))
        Every bank's ``X`` word, the cycle after its fetch (and held after).
    y_read, y_address, y_data : Out, Out, In
        The same for ``Y`` (one bank).
    out : Out(stream.Signature(Wavelet))
    out_color : In(COLOR_BITS)
    tokens : In(range(n_tok + 1))
        The core's active tokens: a READ of ``X`` or ``Y`` steps from a row's last active token
        to the next row's first (:func:`~rtl.core_rows.next_word`).
    busy, stall, error : Out(1)
        This cycle is a READ's cost, a wait for ``out``, a bad word.
    """

    def __init__(self, params):
        if not isinstance(params, CoreParams):
            raise TypeError(f"params must be a CoreParams, not {params!r}")
        self.params = params
        fmt = params.fmt
        super().__init__({
            "start":     In(1),
            "arg":       In(ReadArg),
            "active":    Out(1),
            "count":     Out(CounterReadSignature()),
            "overflow":  In(1),
            "x_read":    Out(params.lanes),
            "x_address": Out(range(params.n_feat * params.tpb)),
            "x_data":    In(data.ArrayLayout(fmt.operand_shape, params.lanes)),
            "y_read":    Out(1),
            "y_address": Out(range(params.n_out * params.n_tok)),
            "y_data":    In(fmt.operand_shape),
            "out":       Out(stream.Signature(Wavelet)),
            "out_color": In(COLOR_BITS),
            "tokens":    In(range(params.n_tok + 1), init=params.n_tok),
            "busy":      Out(1),
            "stall":     Out(1),
            "error":     Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        p, fmt = self.params, self.params.fmt
        lanes = p.lanes
        log_tok, log_lanes = p.n_tok.bit_length() - 1, lanes.bit_length() - 1
        send = Signal()
        address, length = Signal(16), Signal(len(self.arg.len))
        # words of this READ taken so far, and how many of them were bad: the busy cycles,
        # wavelets out and errors it has added to the counters since it started
        done, bad = Signal(len(self.arg.len)), Signal(len(self.arg.len))
        # written before they are read (no reset: a reset beside the enable costs a LUT a bit)
        word = Signal(32, reset_less=True)
        bank = Signal(range(lanes), reset_less=True)
        region = Signal(2, reset_less=True)               # 0 X, 1 Y, 2 counter, 3 bad

        with m.If(self.start):
            m.d.sync += [address.eq(self.arg.addr), length.eq(self.arg.len), done.eq(0),
                         bad.eq(0), self.active.eq(self.arg.len != 0), send.eq(0)]

        # the regions, without carry chains (Y_BASE is bit 15, COUNTER_BASE the top byte)
        in_x = below(address, p.n_feat * p.n_tok)
        in_y = address[15] & below(address[:15], p.n_out * p.n_tok)
        in_c = (address[8:] == COUNTER_BASE >> 8) & below(address[:8], len(COUNTERS))
        t = address[:log_tok]                              # the token: bank, then index
        # the counter at ``address`` (its low bits: COUNTER_BASE's are zero), less this READ's
        # own increments for those reported as they were at ``start`` (one busy cycle for the
        # READ's own, two per word taken; a wavelet out per word; an error per bad word)
        k = address[:4]
        less = Mux(k == COUNTERS.index("busy_cycles"), Cat(1, done),
                   Mux(k == COUNTERS.index("wavelets_out"), done,
                       Mux(k == COUNTERS.index("errors"), bad, 0)))
        with m.If(self.active & ~send):
            m.d.comb += self.busy.eq(1)
            # feature * tpb + index: the token's bank bits taken out (tpb is a power of two)
            m.d.comb += [self.x_address.eq(Cat(address[log_lanes:log_tok], address[log_tok:])),
                         self.x_read.eq(Mux(in_x, Const(1, lanes) << t[:log_lanes], 0)),
                         self.y_address.eq(address - Y_BASE), self.y_read.eq(in_y),
                         self.count.read.eq(1), self.count.index.eq(address[:3]),
                         self.count.less.eq(less)]
            m.d.sync += [
                bank.eq(t[:log_lanes]),
                region.eq(Mux(in_x, 0, Mux(in_y, 1, Mux(in_c, 2, 3)))),
                send.eq(1),
            ]
            # the overflow flag's word is 0 but for bit 0: the register's synchronous reset
            with m.If(k == len(BANKED)):
                m.d.sync += word.eq(self.overflow)
            with m.Else():
                m.d.sync += word.eq(self.count.value)
        reply = data.View(Wavelet, self.out.payload)
        value = Signal(32)
        with m.Switch(region):
            with m.Case(0):
                m.d.comb += value.eq(fmt.operand_word(self.x_data[bank]))
            with m.Case(1):
                m.d.comb += value.eq(fmt.operand_word(self.y_data))
            with m.Case(2):
                m.d.comb += value.eq(word)
        m.d.comb += [reply.data.eq(value), reply.color.eq(self.out_color), reply.ctrl.eq(0)]
        with m.If(self.active & send):
            m.d.comb += self.out.valid.eq(1)
            with m.If(self.out.ready):
                m.d.comb += [self.busy.eq(1), self.error.eq(region == 3)]
                m.d.sync += [address.eq(next_word(address, self.tokens, p.n_tok)),
                             done.eq(done + 1), send.eq(0)]
                with m.If(region == 3):
                    m.d.sync += bad.eq(bad + 1)
                with m.If(done + 1 == length):
                    m.d.sync += self.active.eq(0)
            with m.Else():
                m.d.comb += self.stall.eq(1)
        return m
