"""Formal spec of the whole :class:`~rtl.router.Router` with its routes changing under traffic:
configuration wavelets (``WRITE_ROUTE``, ``SWITCH``) and switch commands (control ``ADVANCE``,
``RESET``, ``TEARDOWN``) arrive at any time, between and among data wavelets, on one input
``u`` the solver picks; the tracked wavelets' properties are checked end to end, from the
input they are taken on to the output registers they leave.

Reduced: two routable colors, one data queue of two entries per input (so both colors share
it) and the configuration queue, no U-turns, a 3-bit drop counter, strapped routes and
configuration route (any tables the solver picks, multicast and empty ones included).

**The reference model.** The spec keeps its own route state, as the router's rules define it
(``docs/router.md``): per color four positions (``rx``, ``tx``), the current and last
position and the torn flag, at reset position 0 from the straps and the rest empty. Every
wavelet taken on ``u`` that the rules apply (a configuration for this router, ``hops == 0``,
accepted from ``u`` by the configuration route, naming a routable color and a known
operation; a switch command of an open color whose route accepts it from ``u`` and has an
output) changes the model as the rules say (``WRITE_ROUTE``: a position and ``last``;
``ADVANCE``: the next position, wrapping after ``last``; ``RESET``: position 0, reopened;
``TEARDOWN``: torn), and is seen by every lookup from the third cycle after the one it was
taken in (the two cycles ``u`` waits). A wavelet taken on input ``j`` in a cycle is routed by
the model's route of its color in that cycle: dropped if the color is open and the route does
not accept ``j`` or has no output but ``j``, queued torn if the color is torn down, else owed
to the route's outputs (``tx`` without ``j``); a configuration is applied, dropped (not
accepted from ``j``, or a bad one) or forwarded along the configuration route.

**Tracked wavelets.** On an arbitrary input ``p`` the solver picks, at any transfer, a wavelet
``t1`` of any color but the configuration color (its data's two low bits 1), and later one
``t2`` of the same color (low bits 2); no other wavelet taken carries either (the data of
other wavelets is narrowed to the low two bits and the opcode bits, which no route decides).
A tracked wavelet taken while its color is torn down has its route decided when it is looked
up again at its queue's head: it is offered (input ``p``'s ``request``) two cycles after that
lookup, or dropped (counted in ``p``'s ``drops``) one cycle after; its route is the model's in
the cycle of the lookup. Checked in every cycle up to the depth:

- *not invented, not duplicated*: a copy leaves an output only after the wavelet was taken,
  and at most once per output;
- *not modified*: all 38 bits as taken;
- *routed by the route of that moment*: only on outputs of its route, never while it waits
  torn, never when it was dropped; a torn one resumes only on a reopened route with an
  output, and is dropped only on a reopened route without one; ``request`` is that route;
- *not lost*: while a copy is owed or it waits torn, the router is not ``idle``;
- *order per (input, color)*: ``t2`` leaves no output of ``t1``'s route before ``t1`` has
  left it (nor any before ``t1``'s route is decided);
- *drop counter exact*: ``drops`` (two cycles later, saturating) is the number of wavelets
  taken that the model drops plus the torn heads dropped on reopening (each input's ``drops``
  beyond its arrivals' is at most one, no more than the wavelets it took torn and has not
  dropped yet, and one when the head it drops is a tracked one the model drops);
- *bounded progress* (``ready=True``, no teardown): every copy of ``t1`` leaves within
  ``bound`` cycles of its transfer.
"""

from amaranth.asserts import AnyConst, AnySeq
from amaranth.hdl import (
    Array,
    Assert,
    Assume,
    Cat,
    Cover,
    Elaboratable,
    Module,
    Mux,
    ResetSignal,
    Signal,
)
from amaranth.lib import data

from wse.rtl.isa import route_straps_layout
from wse.rtl.wavelet import ConfigOp, ConfigPayload, ControlOp, Direction

from .sby import Inside

__all__ = ["RouterReconfigSpec", "CFG_COLOR"]

CFG_COLOR = 31
POSITIONS = 4


class _Route(data.Struct):
    rx: 5
    tx: 5


class RouterReconfigSpec(Elaboratable):
    """``module`` is ``wse.rtl.router`` or a mutant of it (whose ``RouterInput`` or
    ``RouteState`` may be one)."""

    def __init__(self, module, *, n_colors=2, n_queues=1, depth=2, counter_width=3,
                 ready=False, bound=None, teardown=True):
        self.module = module
        self.n_colors, self.n_queues, self.depth = n_colors, n_queues, depth
        self.counter_width, self.ready, self.bound = counter_width, ready, bound
        self.teardown = teardown

    def elaborate(self, platform):
        m = Module()
        n = self.n_colors
        ports = list(Direction)
        router = self.module.Router(
            n_colors=n, n_queues=self.n_queues, depth=self.depth, cfg_color=CFG_COLOR,
            counter_width=self.counter_width, straps=True, u_turns=False)
        inside = Inside(router)
        m.submodules.dut = inside.module
        inputs = [inside.subs[f"input_{port.name.lower()}"] for port in ports]
        m.d.comb += Assume(~ResetSignal())

        strap = Signal(route_straps_layout(n))
        cfg_route = Signal(_Route)
        m.d.comb += [strap.as_value().eq(AnyConst(len(strap.as_value()))),
                     cfg_route.as_value().eq(AnyConst(10)),
                     router.route_init.as_value().eq(strap.as_value()),
                     router.cfg_route_init.as_value().eq(cfg_route.as_value()),
                     router.queue_map_init.as_value().eq(
                         AnyConst(len(router.queue_map_init.as_value())))]

        # The reference model's route state, as lookups see it this cycle.
        pos = [[Signal(_Route, name=f"c{c}_pos{k}") for k in range(POSITIONS)] for c in range(n)]
        cur = [Signal(2, name=f"c{c}_cur") for c in range(n)]
        last = [Signal(2, name=f"c{c}_last") for c in range(n)]
        torn = [Signal(name=f"c{c}_torn") for c in range(n)]
        loaded = Signal()                    # position 0 from the straps (a constant)
        m.d.sync += loaded.eq(1)
        route_of = [Signal(_Route, name=f"c{c}_route") for c in range(n)]
        for c in range(n):
            m.d.comb += route_of[c].eq(Array(pos[c])[cur[c]])
            with m.If(~loaded):
                m.d.sync += pos[c][0].eq(strap[c])

        def lookup(color, port):
            """(torn, accept, tx) of ``color`` from ``port`` in the model, this cycle."""
            known = color < n
            index = color[:max((n - 1).bit_length(), 1)] if n > 1 else 0
            route = Array(route_of)[index] if n > 1 else route_of[0]
            is_torn = known & (Array(torn)[index] if n > 1 else torn[0])
            accept = known & route.rx.bit_select(port.value, 1)
            tx = Mux(known, route.tx & ~port.bit, 0)
            return is_torn, accept, tx

        # Inputs: any wavelet at any time; updates only on input `u`.
        u = AnyConst(range(len(ports)))
        m.d.comb += Assume(u < len(ports))
        p = AnyConst(range(len(ports)))
        m.d.comb += Assume(p < len(ports))
        ins, taken, arrival_drop, arrival_torn = [], [], [], []
        upd_valid = Signal()
        upd_word = Signal.like(router.i_n.payload)
        for port in ports:
            i = router.port_in(port)
            w = i.payload
            m.d.comb += [i.valid.eq(AnySeq(1)), w.as_value().eq(AnySeq(38))]
            is_cfg = w.color == CFG_COLOR
            cfg = data.View(ConfigPayload, w.data)
            op = w.data[28:32]
            is_switch = w.ctrl & ~is_cfg & op.matches(ControlOp.ADVANCE, ControlOp.RESET,
                                                      ControlOp.TEARDOWN)
            consume = is_cfg & (cfg.hops == 0)
            # other wavelets' data: the two low bits and the opcode (no route reads the rest)
            m.d.comb += Assume(is_cfg | (w.data[2:28] == 0))
            if not self.teardown:
                m.d.comb += Assume(~(i.valid & ((is_switch & (op == ControlOp.TEARDOWN)) |
                                                (consume & (cfg.op == ConfigOp.SWITCH) &
                                                 (cfg.cmd == ControlOp.TEARDOWN)))))
            cfg_accept = cfg_route.rx.bit_select(port.value, 1)
            cfg_tx = cfg_route.tx & ~port.bit
            bad_cfg = (cfg.target >= n) | (cfg.op.as_value() > 1)
            c_torn, c_accept, c_tx = lookup(w.color, port)
            drop = Mux(is_cfg, ~cfg_accept | (consume & bad_cfg) | (~consume & (cfg_tx == 0)),
                       ~c_torn & (~c_accept | (c_tx == 0)))
            applies = consume | (is_switch & ~drop & ~c_torn)
            t = i.valid & i.ready
            m.d.comb += Assume(~(i.valid & applies & ~drop) | (u == port.value))
            with m.If((u == port.value) & t & applies & ~drop):
                m.d.comb += [upd_valid.eq(1), upd_word.eq(w)]
            ins.append(i)
            taken.append(t)
            arrival_drop.append(t & drop)
            arrival_torn.append(t & ~is_cfg & c_torn)

        # An update taken in cycle k is seen from cycle k + 3.
        pipe = [(Signal(name=f"upd{s}_valid"), Signal.like(upd_word, name=f"upd{s}"))
                for s in range(2)]
        m.d.sync += [pipe[0][0].eq(upd_valid), pipe[0][1].eq(upd_word),
                     pipe[1][0].eq(pipe[0][0]), pipe[1][1].eq(pipe[0][1])]
        valid, word = pipe[1]
        cfg = data.View(ConfigPayload, word.data)
        is_cfg = word.color == CFG_COLOR
        target = Mux(is_cfg, cfg.target, word.color)
        cmd = Mux(is_cfg, cfg.cmd, word.data[28:32])
        write = is_cfg & (cfg.op == ConfigOp.WRITE_ROUTE)
        for c in range(n):
            with m.If(valid & (target == c)):
                with m.If(write):
                    m.d.sync += [Array(pos[c])[cfg.position].eq(Cat(cfg.rx, cfg.tx)),
                                 last[c].eq(cfg.last)]
                with m.Elif(cmd == ControlOp.ADVANCE):
                    m.d.sync += cur[c].eq(Mux(cur[c] >= last[c], 0, cur[c] + 1))
                with m.Elif(cmd == ControlOp.RESET):
                    m.d.sync += [cur[c].eq(0), torn[c].eq(0)]
                with m.Elif(cmd == ControlOp.TEARDOWN):
                    m.d.sync += torn[c].eq(1)

        # Outputs.
        outs = [router.port_out(port) for port in ports]
        for o in outs:
            m.d.comb += o.ready.eq(1 if self.ready else AnySeq(1))

        # Each input's head drops: its drops beyond the arrivals the model drops.
        head_drop = [Signal(2, name=f"head_drop_{p.name.lower()}") for p in ports]
        for k in range(len(ports)):
            m.d.comb += [head_drop[k].eq(inputs[k].drops - arrival_drop[k]),
                         Assert(head_drop[k] <= 1)]
            # no more heads dropped than wavelets taken torn on that input
            torn_in = Signal(3, name=f"torn_in_{ports[k].name.lower()}")
            m.d.sync += torn_in.eq(torn_in + arrival_torn[k] - head_drop[k])
            m.d.comb += Assert(~head_drop[k] | (torn_in != 0))

        # The tracked input and wavelets.
        pick = AnySeq(2)

        def at_p(values, name, shape=1):
            sig = Signal(shape, name=name)
            with m.Switch(p):
                for k, v in enumerate(values):
                    with m.Case(k):
                        m.d.comb += sig.eq(v)
            return sig

        p_word = Signal.like(upd_word)
        with m.Switch(p):
            for k in range(len(ports)):
                with m.Case(k):
                    m.d.comb += p_word.eq(ins[k].payload)
        p_taken = at_p(taken, "p_taken")
        p_request = at_p([inp.request for inp in inputs], "p_request", 5)
        p_offer = Signal.like(upd_word)
        with m.Switch(p):
            for k in range(len(ports)):
                with m.Case(k):
                    m.d.comb += p_offer.eq(inputs[k].offer)
        p_head_drop = at_p(head_drop, "p_head_drop", 2)
        lookups = [lookup(p_word.color, port) for port in ports]
        p_torn = at_p([lk[0] for lk in lookups], "p_torn")
        p_accept = at_p([lk[1] for lk in lookups], "p_accept")
        p_tx = at_p([lk[2] for lk in lookups], "p_tx", 5)

        # The route of the first tracked wavelet's color from p, one and two cycles ago.
        acc = [Signal(name="acc1"), Signal(name="acc2")]
        tword = [Signal.like(upd_word, name="t1"), Signal.like(upd_word, name="t2")]
        color_now = Mux(acc[0], tword[0].color, p_word.color)
        now = [lookup(color_now, port) for port in ports]
        now_torn = at_p([lk[0] for lk in now], "now_torn")
        now_accept = at_p([lk[1] for lk in now], "now_accept")
        now_tx = at_p([lk[2] for lk in now], "now_tx", 5)
        hist = [(Signal(name=f"h{s}_torn"), Signal(name=f"h{s}_accept"),
                 Signal(5, name=f"h{s}_tx")) for s in (1, 2)]
        m.d.sync += [hist[0][0].eq(now_torn), hist[0][1].eq(now_accept), hist[0][2].eq(now_tx),
                     hist[1][0].eq(hist[0][0]), hist[1][1].eq(hist[0][1]),
                     hist[1][2].eq(hist[0][2])]

        drop = [Signal(name="drop1"), Signal(name="drop2")]
        waiting = [Signal(name="waiting1"), Signal(name="waiting2")]     # torn, undecided
        tx = [Signal(5, name="tx1"), Signal(5, name="tx2")]
        seen = [Signal(5, name="seen1"), Signal(5, name="seen2")]
        age = Signal(range(64))
        enter = [p_taken & pick[0] & ~acc[0] & (p_word.color != CFG_COLOR),
                 p_taken & pick[1] & acc[0] & ~acc[1] & (p_word.color == tword[0].color)]
        mine = [(p_word.data[:2] == k + 1) & (p_word.color != CFG_COLOR) for k in range(2)]
        for k in range(2):
            for j in range(len(ports)):
                # nobody else carries the tracked data
                w = ins[j].payload
                m.d.comb += Assume(~(taken[j] & (w.color != CFG_COLOR) & (w.data[:2] == k + 1))
                                   | (enter[k] & (p == j)))
            with m.If(enter[k]):
                m.d.comb += Assume(mine[k])
                m.d.sync += [acc[k].eq(1), tword[k].eq(p_word),
                             drop[k].eq(~p_torn & (~p_accept | (p_tx == 0))),
                             waiting[k].eq(p_torn), tx[k].eq(Mux(p_torn, 0, p_tx))]
        with m.If(acc[0] & (age != 63)):
            m.d.sync += age.eq(age + 1)

        # A torn tracked wavelet's route decided at its queue's head.
        for k in range(2):
            at_head = acc[k] & waiting[k] & (p_offer.color != CFG_COLOR) & \
                (p_offer.data[:2] == k + 1)
            with m.If(at_head & (p_request != 0)):          # resumed: looked up 2 cycles ago
                h_torn, h_accept, h_tx = hist[1]
                m.d.comb += [Assert(~h_torn & h_accept & (h_tx != 0)),
                             Assert(p_request == h_tx)]
                m.d.sync += [waiting[k].eq(0), tx[k].eq(h_tx)]
            with m.If(at_head & (p_head_drop != 0)):        # dropped: looked up 1 cycle ago
                h_torn, h_accept, h_tx = hist[0]
                m.d.comb += Assert(~h_torn & (~h_accept | (h_tx == 0)))
                m.d.sync += [waiting[k].eq(0), drop[k].eq(1)]
            # a head that is not waiting torn is never dropped
            with m.If(acc[k] & ~waiting[k] & (p_offer.color != CFG_COLOR) &
                      (p_offer.data[:2] == k + 1)):
                m.d.comb += Assert(p_head_drop == 0)

        # What leaves.
        for j, o in enumerate(outs):
            left = o.valid & o.ready & (o.payload.color != CFG_COLOR)
            for k in range(2):
                with m.If(left & (o.payload.data[:2] == k + 1)):
                    m.d.comb += [
                        Assert(acc[k]),                                        # not invented
                        Assert(o.payload.as_value() == tword[k].as_value()),   # not modified
                        Assert(~waiting[k] & ~drop[k] & tx[k][j]),             # its route
                        Assert(~seen[k][j]),                                   # not duplicated
                    ]
                    if k == 1:                                                 # order
                        m.d.comb += Assert(~waiting[0] & (drop[0] | ~tx[0][j] | seen[0][j]))
                    m.d.sync += seen[k][j].eq(1)
        for k in range(2):
            with m.If(acc[k] & (waiting[k] | (~drop[k] & (seen[k] != tx[k])))):
                m.d.comb += Assert(~router.idle)                               # not lost
        if self.ready and self.bound is not None:
            with m.If(acc[0] & ~drop[0] & (age >= self.bound)):
                m.d.comb += Assert(~waiting[0] & (seen[0] == tx[0]))           # progress

        # The drop counter: the model's arrival drops and the heads dropped, two cycles
        # later, saturating.
        limit = (1 << self.counter_width) - 1
        total = Signal(range(2 * len(ports) + 1))
        m.d.comb += total.eq(sum(arrival_drop) + sum(head_drop))
        late = Signal.like(total)
        count = Signal(range(limit + 2 * len(ports) + 1))
        m.d.sync += [late.eq(total), count.eq(Mux(count + late > limit, limit, count + late))]
        m.d.comb += [Assert(router.drops == count), Assert(router.error == (count != 0))]

        # Covers.
        # t1's color's route (from p) changed, or torn down, while t1 is inside and not torn
        changed = Signal()
        torn_down = Signal()
        inside_1 = acc[0] & ~waiting[0] & ~drop[0] & (seen[0] != tx[0])
        with m.If(inside_1 & ((now_tx != hist[0][2]) | (now_accept != hist[0][1]))):
            m.d.sync += changed.eq(1)
        with m.If(inside_1 & now_torn & ~hist[0][0]):
            m.d.sync += torn_down.eq(1)
        m.d.comb += [
            Cover(changed & acc[0] & ~drop[0] & (seen[0] == tx[0]) & (tx[0] != 0)),
            Cover(torn_down & (seen[0] == tx[0])),
            Cover(acc[0] & waiting[0] & ~router.idle),
            Cover(acc[0] & drop[0] & (count != 0)),
        ]
        return m
