"""Formal spec of one router input, :class:`~rtl.router_input.RouterInput`: the route lookup on
arrival, the drop decision, the queues (circular buffers in LUT RAM, the tags per slot with
2-deep queues), the candidate rotation and the multicast's "copies still owed" masks.

Reduced: two routable colors, ``n_queues`` queues of ``depth`` entries, no configuration color,
no switch commands (the solver never sends a control wavelet whose operation is ``ADVANCE``,
``RESET`` or ``TEARDOWN``), no U-turns, port W. The rest of the router is free within what its
own proofs guarantee:

- the route lookup answers from a fixed table the solver picks (per color: accept, ``tx``; no
  teardown), and the queue of each color is an arbitrary constant;
- ``enable`` (the route state's walk done) is free;
- ``served`` is any subset of ``request`` in every cycle (the allocator grants only requesters,
  ``tests/formal/arbiter.py``; the output registers take what they are granted), or exactly
  ``request`` (``ready=True``: every output free and granting, for the progress bound).

Data is narrowed to ``data_bits`` bits (the rest zero; the input never looks at the data of a
wavelet that is not a switch command or configuration): the two tracked wavelets carry 1 and 2,
and no other wavelet taken carries either. Checked in every cycle up to the depth: the drops of
the cycle exact; a tracked wavelet offered only after it was taken, unmodified, requested and
served only on outputs of its route (and never when it was to be dropped), at most once each;
``t2`` (same color, taken after ``t1``) served on no output before ``t1``; while a copy is owed
the input is not ``empty``; with ``ready``, every copy served within ``bound`` cycles.
"""

from amaranth.asserts import AnyConst, AnySeq
from amaranth.hdl import Array, Assert, Assume, Cover, Elaboratable, Module, Mux, Signal

from wse.rtl.wavelet import ControlOp, Direction

__all__ = ["RouterInputSpec"]

_SWITCH_OPS = (ControlOp.ADVANCE, ControlOp.RESET, ControlOp.TEARDOWN)


class RouterInputSpec(Elaboratable):
    """``module`` is ``wse.rtl.router_input`` or a mutant of it."""

    def __init__(self, module, *, n_colors=2, n_queues=2, depth=2, ready=False, bound=None,
                 data_bits=2, port=Direction.W):
        self.module, self.n_colors, self.n_queues, self.depth = module, n_colors, n_queues, depth
        self.ready, self.bound, self.data_bits, self.port = ready, bound, data_bits, port

    def elaborate(self, platform):
        m = Module()
        n_colors, port = self.n_colors, self.port
        dut = m.submodules.dut = self.module.RouterInput(
            n_queues=self.n_queues, depth=self.depth, n_colors=n_colors, cfg_color=None,
            port=port, u_turns=False)

        # The route table (fixed, as the solver picks it) and the queue of each color.
        accept = AnyConst(n_colors)
        tx_of = [AnyConst(5) for _ in range(n_colors)]
        queue_of = [AnyConst(range(self.n_queues)) for _ in range(n_colors)]
        for q in queue_of:
            m.d.comb += Assume(q < self.n_queues)

        def lookup(color):
            known = color < n_colors
            index = color[:max((n_colors - 1).bit_length(), 1)]
            return (known & Array(accept[c] for c in range(n_colors))[index],
                    known.replicate(5) & Array(tx_of)[index],
                    Array(queue_of)[index])     # (a color with no route: any queue)

        w = dut.i.payload
        arrive_accept, arrive_tx, arrive_queue = lookup(dut.arrive.color)
        head_accept, head_tx, _ = lookup(dut.head.color)
        other_queue = AnyConst(range(self.n_queues))
        m.d.comb += [
            dut.arrive.route.accept.eq(arrive_accept), dut.arrive.route.tx.eq(arrive_tx),
            dut.head.route.accept.eq(head_accept), dut.head.route.tx.eq(head_tx),
            Assume(other_queue < self.n_queues),
            dut.cfg_route.eq(0),
        ]
        if self.n_queues > 1:
            m.d.comb += dut.queue.eq(Mux(w.color < n_colors, arrive_queue, other_queue))
        m.d.comb += [dut.enable.eq(AnySeq(1)), dut.update.ready.eq(AnySeq(1))]
        m.d.comb += [dut.i.valid.eq(AnySeq(1)), dut.i.payload.as_value().eq(AnySeq(38))]
        op = w.data[28:32]
        m.d.comb += Assume(~(dut.i.valid & w.ctrl & op.matches(*(o.value for o in _SWITCH_OPS))))
        if self.data_bits < 32:
            m.d.comb += Assume(w.data[self.data_bits:] == 0)
        if self.ready:
            m.d.comb += dut.served.eq(dut.request)
        else:
            served = AnySeq(5)
            m.d.comb += [dut.served.eq(served), Assume((served & ~dut.request) == 0)]

        # What arrives: the drop expected.
        taken = dut.i.valid & dut.i.ready
        out_tx = arrive_tx & ~port.bit
        expect_drop = ~arrive_accept | (out_tx == 0)
        m.d.comb += [Assert(dut.drops == (taken & expect_drop)),
                     Assert(~dut.update.valid)]

        # Two tracked wavelets (data 1 and 2), the second of the first's color.
        pick = AnySeq(2)
        acc = [Signal(name="acc1"), Signal(name="acc2")]
        word = [Signal.like(w, name="t1"), Signal.like(w, name="t2")]
        drop = [Signal(name="drop1"), Signal(name="drop2")]
        tx = [Signal(5, name="tx1"), Signal(5, name="tx2")]
        seen = [Signal(5, name="seen1"), Signal(5, name="seen2")]
        age = Signal(range(64))
        enter = [taken & pick[0] & ~acc[0],
                 taken & pick[1] & acc[0] & ~acc[1] & (w.color == word[0].color)]
        for k in range(2):
            m.d.comb += Assume(~(taken & (w.data == k + 1)) | enter[k])
            with m.If(enter[k]):
                m.d.comb += Assume(w.data == k + 1)
                m.d.sync += [acc[k].eq(1), word[k].eq(w), drop[k].eq(expect_drop),
                             tx[k].eq(out_tx)]
        with m.If(acc[0] & (age != 63)):
            m.d.sync += age.eq(age + 1)

        # What is offered and served.
        for k in range(2):
            mine = dut.offer.data == k + 1
            with m.If(mine & (dut.request != 0)):
                m.d.comb += [Assert(acc[k]),                                    # not invented
                             Assert(dut.offer.as_value() == word[k].as_value()),   # unmodified
                             Assert(~drop[k]),                                  # not a drop
                             Assert((dut.request & ~tx[k]) == 0),               # its route
                             Assert((dut.request & seen[k]) == 0)]              # no duplicate
                m.d.sync += seen[k].eq(seen[k] | dut.served)
                if k == 1:
                    m.d.comb += Assert((dut.served & ~seen[0]) == 0)            # order
            with m.If(acc[k] & ~drop[k] & (seen[k] != tx[k])):
                m.d.comb += Assert(~dut.empty)                                  # not lost
        if self.ready and self.bound is not None:
            with m.If(acc[0] & ~drop[0] & (age >= self.bound)):
                m.d.comb += Assert(seen[0] == tx[0])                            # progress

        two_outs = (tx[0] & (tx[0] - 1)) != 0
        m.d.comb += [
            Cover(acc[1] & two_outs & (seen[1] == tx[1])),              # multicast, both, order
            Cover(acc[0] & drop[0]),                                    # a tracked drop
            Cover(acc[1] & (seen[0] == 0) & (dut.request == 0)),        # both queued, waiting
        ]
        return m
