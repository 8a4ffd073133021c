"""Formal spec of the whole :class:`~rtl.router.Router`, reduced: two routable colors (every
other color has no route), ``n_queues`` data queues of ``depth`` entries per input, a
``counter_width``-bit drop counter, no U-turns (a tile's router), strapped routes: position 0
of each color is an arbitrary constant the solver picks (so every route table of two colors is
covered, multicast and empty ``tx`` included), and so is the queue of each color. No
configuration color and no switch commands (the solver never sends a control wavelet whose
operation is ``ADVANCE``, ``RESET`` or ``TEARDOWN``): routes are fixed after the reset walk.

Every input is free: any wavelet, offered at any time, taken whenever the router says
``ready``; every output's ``ready`` is free (any backpressure), or held high (``ready=True``,
for the progress bound). Two wavelets are tracked: the solver picks, at any transfer on an
arbitrary input ``p``, a wavelet ``t1`` with data ``d1``, and later one ``t2`` of the same color
with data ``d2``; no other wavelet taken on any input carries ``d1`` or ``d2`` (data never
decides a route, so this costs nothing). Checked in every cycle up to the depth:

- *no invention, no duplication*: a wavelet carrying ``d1`` leaves an output only after ``t1``
  was taken, at most once per output;
- *not modified*: it is ``t1`` bit for bit (color, control bit, data);
- *routed*: only on outputs of ``t1``'s route (``tx`` without ``p``), and never when ``t1``'s
  color is not accepted from ``p`` or has no output (a drop);
- *nothing lost silently*: while a copy of ``t1`` is owed, the router is not ``idle``;
- *order per (input, color)*: ``t2`` leaves no output before ``t1`` has left it;
- *drop counter exact*: ``drops`` (two cycles after the transfers) is the number of wavelets
  taken whose color is not accepted from their input or has no output, saturating; ``error``
  is set exactly when one was;
- *bounded progress* (``ready=True``): every copy of ``t1`` leaves within ``bound`` cycles of
  the transfer.
"""

from amaranth.asserts import AnyConst, AnySeq
from amaranth.hdl import Assert, Assume, Cat, Cover, Elaboratable, Module, Mux, Signal

from wse.rtl.isa import route_straps_layout
from wse.rtl.wavelet import ControlOp, Direction

__all__ = ["RouterSpec"]

_SWITCH_OPS = (ControlOp.ADVANCE, ControlOp.RESET, ControlOp.TEARDOWN)


class RouterSpec(Elaboratable):
    """``module`` is ``wse.rtl.router`` or a mutant of it (whose ``RouterInput`` may be one)."""

    def __init__(self, module, *, n_colors=2, n_queues=1, depth=2, counter_width=3,
                 ready=False, bound=None, checks=("tracked", "drops"), data_bits=2):
        self.module = module
        self.n_colors, self.n_queues, self.depth = n_colors, n_queues, depth
        self.counter_width, self.ready, self.bound = counter_width, ready, bound
        self.checks = set(checks)
        self.data_bits = data_bits

    def elaborate(self, platform):
        m = Module()
        n_colors = self.n_colors
        dut = m.submodules.dut = self.module.Router(
            n_colors=n_colors, n_queues=self.n_queues, depth=self.depth, cfg_color=None,
            counter_width=self.counter_width, straps=True, u_turns=False)
        ports = list(Direction)
        routes = AnyConst(route_straps_layout(n_colors).size)
        m.d.comb += [dut.route_init.as_value().eq(routes),
                     dut.queue_map_init.as_value().eq(AnyConst(len(dut.queue_map_init.as_value()))),
                     dut.cfg_route_init.as_value().eq(0)]
        route = dut.route_init

        def expected(port, color):
            """(drop, tx) of a wavelet of ``color`` taken on ``port``."""
            known = color < n_colors
            entry = route[Mux(known, color, 0)] if n_colors > 1 else route[0]
            tx = Mux(known, entry.tx & ~port.bit, 0)
            accept = known & (entry.rx >> port.value)[0]
            return ~accept | (tx == 0), tx

        # Inputs: free wavelets, never a switch command.
        ins, taken, drop_in, tx_in = [], [], [], []
        for port in ports:
            i = dut.port_in(port)
            m.d.comb += [i.valid.eq(AnySeq(1)), i.payload.as_value().eq(AnySeq(38))]
            op = i.payload.data[28:32]
            m.d.comb += Assume(~(i.valid & i.payload.ctrl &
                                 op.matches(*(o.value for o in _SWITCH_OPS))))
            if self.data_bits < 32:
                m.d.comb += Assume(i.payload.data[self.data_bits:] == 0)
            ins.append(i)
            taken.append(i.valid & i.ready)
            drop, tx = expected(port, i.payload.color)
            drop_in.append(drop)
            tx_in.append(tx)
        outs = [dut.port_out(port) for port in ports]
        for o in outs:
            m.d.comb += o.ready.eq(1 if self.ready else AnySeq(1))

        # The tracked input and wavelets.
        p = AnyConst(range(len(ports)))
        m.d.comb += Assume(p < len(ports))
        # Data is narrowed to `data_bits` (the rest zero): the tracked ones are 1 and 2.
        d = [1, 2]
        pick = AnySeq(2)
        p_taken = Cat(taken).bit_select(p, 1)
        p_word = Signal.like(ins[0].payload)
        p_drop, p_tx = Signal(), Signal(5)
        with m.Switch(p):
            for k in range(len(ports)):
                with m.Case(k):
                    m.d.comb += [p_word.eq(ins[k].payload), p_drop.eq(drop_in[k]),
                                 p_tx.eq(tx_in[k])]
        acc = [Signal(name="acc1"), Signal(name="acc2")]
        word = [Signal.like(p_word, name="t1"), Signal.like(p_word, name="t2")]
        drop = [Signal(name="drop1"), Signal(name="drop2")]
        tx = [Signal(5, name="tx1"), Signal(5, name="tx2")]
        seen = [Signal(5, name="seen1"), Signal(5, name="seen2")]
        age = Signal(range(64))
        enter = [p_taken & pick[0] & ~acc[0],
                 p_taken & pick[1] & acc[0] & ~acc[1] & (p_word.color == word[0].color)]
        for k in range(2):
            with m.If(enter[k]):
                m.d.comb += Assume(p_word.data == d[k])
                m.d.sync += [acc[k].eq(1), word[k].eq(p_word), drop[k].eq(p_drop),
                             tx[k].eq(p_tx)]
            for j in range(len(ports)):
                # nobody else carries the tracked data
                m.d.comb += Assume(~(taken[j] & (ins[j].payload.data == d[k])) |
                                   (enter[k] & (p == j)))
        with m.If(acc[0] & (age != 63)):
            m.d.sync += age.eq(age + 1)

        # What leaves.
        def check(condition):
            return Assert(condition) if "tracked" in self.checks else Assume(1)

        for j, o in enumerate(outs):
            left = o.valid & o.ready
            for k in range(2):
                copy = left & (o.payload.data == d[k])
                with m.If(copy):
                    m.d.comb += [
                        check(acc[k]),                                 # not invented
                        check(o.payload.as_value() == word[k].as_value()),   # not modified
                        check(~drop[k] & tx[k][j]),                    # on its route
                        check(~seen[k][j]),                            # not duplicated
                    ]
                    if k == 1:
                        m.d.comb += check(seen[0][j])                  # order
                    m.d.sync += seen[k][j].eq(1)
        for k in range(2):
            with m.If(acc[k] & ~drop[k] & (seen[k] != tx[k])):
                m.d.comb += check(~dut.idle)                           # not lost silently
        if self.ready and self.bound is not None:
            with m.If(acc[0] & ~drop[0] & (age >= self.bound)):
                m.d.comb += check(seen[0] == tx[0])                    # bounded progress

        # The drop counter: the drops taken, counted two cycles later, saturating.
        limit = (1 << self.counter_width) - 1
        now = Signal(range(len(ports) + 1))
        m.d.comb += now.eq(sum(t & dr for t, dr in zip(taken, drop_in)))
        late = Signal.like(now)
        count = Signal(range(limit + len(ports) + 1))
        m.d.sync += [late.eq(now), count.eq(Mux(count + late > limit, limit, count + late))]
        if "drops" in self.checks:
            m.d.comb += [Assert(dut.drops == count), Assert(dut.error == (count != 0))]

        # Covers: both tracked wavelets out of every output of a multicast, a drop counted,
        # the counter saturated, both tracked wavelets in the router at once.
        two_outs = (tx[0] & (tx[0] - 1)) != 0
        m.d.comb += [
            Cover(acc[1] & ~drop[0] & two_outs & (seen[1] == tx[1])),
            Cover(count == limit),
            Cover(acc[0] & drop[0] & (count != 0)),
            Cover(acc[1] & (seen[0] == 0)),
        ]
        return m
