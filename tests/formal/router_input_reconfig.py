"""Formal spec of one router input, :class:`~rtl.router_input.RouterInput`, with its routes
changing under traffic: the configuration color (31) and switch commands allowed, and every
color's route (accept, ``tx``, torn) changed at any cycle, to any value, by the spec (the rest
of the router's updates, from this input or any other: a superset of what the route state can
do).

Reduced: two routable colors, ``data_queues`` data queues of ``depth`` entries and the
configuration queue, no U-turns, port W; the configuration route (accept, ``tx``) and the
queue of each color are constants the solver picks; ``enable`` and ``update.ready`` are free;
``served`` is any subset of ``request`` (or all of it, ``ready=True``). The data of a wavelet
that is not a configuration is narrowed to its two low bits and its opcode (bits 31:28).

Checked in every cycle up to the depth:

- *drops exact*: ``drops`` is the arrivals the route of that cycle drops (an open color whose
  route does not accept W or has no output but W; a configuration not accepted, naming a color
  outside the table or an unknown operation, or to forward with no output) plus at most one
  head dropped on reopening, and no more heads than wavelets taken torn;
- *updates*: a configuration for this router or a switch command of an open color that is not
  dropped is handed to ``update`` in the next cycle, exactly (write, color, command, position,
  last, ``rx``, ``tx``), held until taken, and nothing else is; the input takes nothing while
  its update is pending nor in the cycle after it is taken (so its next wavelet is looked up
  after the change);
- for two tracked wavelets (low bits 1 and 2) of one color, not the configuration's: requested
  and served only on outputs of the route of the moment they were taken (or, taken while their
  color was torn down, of the moment they were looked up again at the head, two cycles before
  they are first requested; a head dropped then had a reopened route without an output), never
  while torn or dropped, unmodified, each output at most once, ``t2`` on no output of ``t1``'s
  before ``t1``; the input not ``empty`` while a copy is owed or the wavelet waits torn;
- *bounded progress* (``ready=True``, no color torn down, no configuration to forward): every
  copy of ``t1`` served within ``bound`` cycles. (A queue whose head goes on leaving keeps the
  candidate, so a stream of configuration to forward holds the data queue back while it lasts:
  no bound holds with it.)
"""

from amaranth.asserts import AnyConst, AnySeq
from amaranth.hdl import Array, Assert, Assume, Cover, Elaboratable, Module, Mux, Signal
from amaranth.lib import data

from wse.rtl.wavelet import ConfigOp, ConfigPayload, ControlOp, Direction

__all__ = ["RouterInputReconfigSpec"]

CFG_COLOR = 31


class RouterInputReconfigSpec(Elaboratable):
    """``module`` is ``wse.rtl.router_input`` or a mutant of it."""

    def __init__(self, module, *, n_colors=2, data_queues=1, depth=2, ready=False, bound=None,
                 port=Direction.W):
        self.module, self.n_colors, self.depth = module, n_colors, depth
        self.data_queues, self.ready, self.bound, self.port = data_queues, ready, bound, port

    def elaborate(self, platform):
        m = Module()
        n, port, Q = self.n_colors, self.port, self.data_queues + 1
        dut = m.submodules.dut = self.module.RouterInput(
            n_queues=Q, depth=self.depth, n_colors=n, cfg_color=CFG_COLOR, port=port,
            u_turns=False)

        # Every color's route, as the spec changes it (any change, any cycle).
        accept = [Signal(name=f"c{c}_accept") for c in range(n)]
        tx_of = [Signal(5, name=f"c{c}_tx") for c in range(n)]
        torn = [Signal(name=f"c{c}_torn") for c in range(n)]
        for c in range(n):
            with m.If(AnySeq(1)):
                m.d.sync += [accept[c].eq(AnySeq(1)), tx_of[c].eq(AnySeq(5))]
                if self.bound is None:
                    m.d.sync += torn[c].eq(AnySeq(1))
        queue_of = [AnyConst(range(self.data_queues)) for _ in range(n)]
        for q in queue_of:
            m.d.comb += Assume(q < self.data_queues)
        cfg_accept, cfg_tx = AnyConst(1), AnyConst(5)

        def lookup(color):
            """(torn, accept, tx) of ``color`` now."""
            known = color < n
            index = color[:max((n - 1).bit_length(), 1)]
            return (known & Array(torn)[index], known & Array(accept)[index],
                    known.replicate(5) & Array(tx_of)[index])

        w = dut.i.payload
        for look in (dut.arrive, dut.head):
            t, a, x = lookup(look.color)
            m.d.comb += [look.route.torn.eq(t), look.route.accept.eq(a), look.route.tx.eq(x)]
        m.d.comb += [dut.cfg_route.accept.eq(cfg_accept), dut.cfg_route.tx.eq(cfg_tx),
                     dut.cfg_route.torn.eq(0)]
        is_cfg = w.color == CFG_COLOR
        other_queue = AnyConst(range(self.data_queues))
        m.d.comb += Assume(other_queue < self.data_queues)
        if Q > 1:
            m.d.comb += dut.queue.eq(Mux(is_cfg, Q - 1, Mux(
                w.color < n, Array(queue_of)[w.color[:max((n - 1).bit_length(), 1)]],
                other_queue)))
        m.d.comb += [dut.enable.eq(AnySeq(1)), dut.update.ready.eq(AnySeq(1))]
        m.d.comb += [dut.i.valid.eq(AnySeq(1)), w.as_value().eq(AnySeq(38))]
        m.d.comb += Assume(is_cfg | (w.data[2:28] == 0))
        if self.ready:
            m.d.comb += dut.served.eq(dut.request)
        else:
            served = AnySeq(5)
            m.d.comb += [dut.served.eq(served), Assume((served & ~dut.request) == 0)]

        # What arrives: the drop and the update expected.
        taken = dut.i.valid & dut.i.ready
        cfg = data.View(ConfigPayload, w.data)
        op = w.data[28:32]
        is_switch = w.ctrl & ~is_cfg & op.matches(ControlOp.ADVANCE, ControlOp.RESET,
                                                  ControlOp.TEARDOWN)
        consume = is_cfg & (cfg.hops == 0)
        c_torn, c_accept, c_tx = lookup(w.color)
        out_tx = c_tx & ~port.bit
        bad_cfg = (cfg.target >= n) | (cfg.op.as_value() > 1)
        drop = Mux(is_cfg, ~cfg_accept | (consume & bad_cfg) |
                   (~consume & ((cfg_tx & ~port.bit) == 0)),
                   ~c_torn & (~c_accept | (out_tx == 0)))
        applies = ~drop & (consume | (is_switch & ~c_torn))
        if self.bound is not None:
            # no configuration to forward (see the docstring)
            m.d.comb += Assume(~(dut.i.valid & is_cfg & ~consume))
        head_drop = Signal(2)
        m.d.comb += [head_drop.eq(dut.drops - (taken & drop)), Assert(head_drop <= 1)]
        torn_in = Signal(4)            # wavelets taken torn, less the heads dropped
        m.d.sync += torn_in.eq(torn_in + (taken & ~is_cfg & c_torn) - head_drop)
        m.d.comb += Assert(~head_drop | (torn_in != 0))

        pending = Signal()
        after = Signal()
        want = Signal.like(dut.update.payload)
        m.d.sync += after.eq(dut.update.valid & dut.update.ready)
        with m.If(taken & applies):
            m.d.sync += [pending.eq(1), want.write.eq(is_cfg & (cfg.op == ConfigOp.WRITE_ROUTE)),
                         want.color.eq(Mux(is_cfg, cfg.target, w.color)),
                         want.cmd.eq(Mux(is_cfg, cfg.cmd, op)),
                         want.position.eq(cfg.position), want.last.eq(cfg.last),
                         want.rx.eq(cfg.rx), want.tx.eq(cfg.tx)]
        with m.Elif(dut.update.ready):
            m.d.sync += pending.eq(0)
        m.d.comb += [Assert(dut.update.valid == pending),
                     Assert(~dut.i.ready | ~(pending | after))]
        with m.If(pending):
            m.d.comb += Assert(dut.update.payload.as_value() == want.as_value())

        # Two tracked wavelets (low bits 1 and 2), the second of the first's color.
        pick = AnySeq(2)
        acc = [Signal(name="acc1"), Signal(name="acc2")]
        word = [Signal.like(w, name="t1"), Signal.like(w, name="t2")]
        drop_t = [Signal(name="drop1"), Signal(name="drop2")]
        waiting = [Signal(name="waiting1"), Signal(name="waiting2")]
        tx = [Signal(5, name="tx1"), Signal(5, name="tx2")]
        seen = [Signal(5, name="seen1"), Signal(5, name="seen2")]
        age = Signal(range(64))
        enter = [taken & pick[0] & ~acc[0] & ~is_cfg,
                 taken & pick[1] & acc[0] & ~acc[1] & (w.color == word[0].color)]
        for k in range(2):
            m.d.comb += Assume(~(taken & ~is_cfg & (w.data[:2] == k + 1)) | enter[k])
            with m.If(enter[k]):
                m.d.comb += Assume(w.data[:2] == k + 1)
                m.d.sync += [acc[k].eq(1), word[k].eq(w), drop_t[k].eq(drop),
                             waiting[k].eq(c_torn), tx[k].eq(Mux(c_torn, 0, out_tx))]
        with m.If(acc[0] & (age != 63)):
            m.d.sync += age.eq(age + 1)

        # The route of t1's color one and two cycles ago (a torn head's lookup).
        h_torn, h_accept, h_tx = lookup(Mux(acc[0], word[0].color, w.color))
        hist = [(Signal(name=f"h{s}_torn"), Signal(name=f"h{s}_accept"),
                 Signal(5, name=f"h{s}_tx")) for s in (1, 2)]
        m.d.sync += [hist[0][0].eq(h_torn), hist[0][1].eq(h_accept),
                     hist[0][2].eq(h_tx & ~port.bit),
                     hist[1][0].eq(hist[0][0]), hist[1][1].eq(hist[0][1]),
                     hist[1][2].eq(hist[0][2])]

        offer_cfg = dut.offer.color == CFG_COLOR
        head_dropped = [Signal(name="head_dropped1"), Signal(name="head_dropped2")]
        for k in range(2):
            is_head = ~offer_cfg & (dut.offer.data[:2] == k + 1)
            at_head = acc[k] & waiting[k] & is_head
            with m.If(at_head & (dut.request != 0)):        # resumed: looked up 2 cycles ago
                m.d.comb += [Assert(~hist[1][0] & hist[1][1] & (hist[1][2] != 0)),
                             Assert(dut.request == hist[1][2])]
                m.d.sync += [waiting[k].eq(0), tx[k].eq(hist[1][2])]
            with m.If(at_head & (head_drop != 0)):          # dropped: looked up 1 cycle ago
                m.d.comb += Assert(~hist[0][0] & (~hist[0][1] | (hist[0][2] == 0)))
                m.d.sync += [waiting[k].eq(0), drop_t[k].eq(1), head_dropped[k].eq(1)]
            with m.If(acc[k] & ~waiting[k] & is_head):
                m.d.comb += Assert(head_drop == 0)                  # only torn heads dropped

        # What is offered and served.
        for k in range(2):
            mine = ~offer_cfg & (dut.offer.data[:2] == k + 1)
            with m.If(mine & (dut.request != 0)):
                m.d.comb += [Assert(acc[k]),                                      # invented
                             Assert(dut.offer.as_value() == word[k].as_value()),  # unmodified
                             Assert(~drop_t[k]),                                  # not a drop
                             Assert(waiting[k] | ((dut.request & ~tx[k]) == 0)),  # its route
                             Assert((dut.request & seen[k]) == 0)]                # duplicate
                m.d.sync += seen[k].eq(seen[k] | dut.served)
                if k == 1:
                    m.d.comb += Assert(~waiting[0] & (drop_t[0] |
                                       ((dut.served & tx[0] & ~seen[0]) == 0)))  # order
            with m.If(acc[k] & (waiting[k] | (~drop_t[k] & (seen[k] != tx[k])))):
                m.d.comb += Assert(~dut.empty)                                   # not lost
        if self.ready and self.bound is not None:
            with m.If(acc[0] & ~drop_t[0] & (age >= self.bound)):
                m.d.comb += Assert(seen[0] == tx[0])                             # progress

        # Covers: a tracked wavelet torn on arrival, reopened and out of every output of its
        # new route; one dropped on reopening; a route changed while t1 is queued, t1 out on
        # the old one; the pair in order with an update of this input's between them.
        resumed = Signal()
        with m.If(acc[0] & waiting[0] & (dut.request != 0) & ~offer_cfg &
                  (dut.offer.data[:2] == 1)):
            m.d.sync += resumed.eq(1)
        changed = Signal()
        t1_color = word[0].color[:max((n - 1).bit_length(), 1)]
        now_tx = Array(tx_of)[t1_color] & ~port.bit
        with m.If(acc[0] & ~drop_t[0] & ~waiting[0] & (seen[0] != tx[0]) & (now_tx != tx[0])):
            m.d.sync += changed.eq(1)
        update_between = Signal()
        with m.If(acc[0] & ~acc[1] & dut.update.valid):
            m.d.sync += update_between.eq(1)
        self.cover_names = ["reopened", "head dropped", "rerouted", "update between"]
        m.d.comb += [
            Cover(resumed & (seen[0] == tx[0]) & (tx[0] != 0)),
            Cover(head_dropped[0] & acc[1] & (seen[1] == tx[1]) & (tx[1] != 0)),
            Cover(changed & (seen[0] == tx[0]) & (tx[0] != 0)),
            Cover(update_between & acc[1] & (seen[1] == tx[1]) & (tx[1] != 0)),
        ]
        return m
