"""Formal specs of round-robin fairness: :class:`~rtl.arbiter.RoundRobin` (the route state's
pick among update requests, ``hold=False``, and the stream arbiter, ``hold=True``) and
:class:`~rtl.allocator.SwitchAllocator` (one round robin per router output).

For an arbitrary requester ``i`` (and output ``o``), proven by k-induction:

- a grant goes only to a requester, and some requester is granted whenever one asks
  (``SwitchAllocator``: whenever the output is free; grants one-hot, ``served`` the transpose);
- fairness: while ``i`` keeps asking, at most ``count - 1`` grants go to others before ``i``'s
  (``RoundRobin(hold=True)``: transfers, so within ``count`` cycles with ``ready`` high;
  ``hold=False``: cycles; ``SwitchAllocator``: grants of output ``o``, so within ``n`` cycles
  while ``o`` is free).
"""

from amaranth.asserts import AnyConst, AnySeq
from amaranth.hdl import Array, Assert, Assume, Cat, Cover, Elaboratable, Module, Mux, Signal, Value

from .sby import Inside

__all__ = ["RoundRobinSpec", "AllocatorSpec"]


class RoundRobinSpec(Elaboratable):
    """``module`` is ``wse.rtl.arbiter`` or a mutant of it."""

    def __init__(self, module, count, *, hold, invariants=True):
        self.module, self.count, self.hold = module, count, hold
        self.invariants = invariants

    def elaborate(self, platform):
        m = Module()
        n = self.count
        dut = self.module.RoundRobin(n, hold=self.hold)
        inside = Inside(dut, platform)
        m.submodules.dut = inside.module
        requests, ready = AnySeq(n), AnySeq(1)
        m.d.comb += [dut.requests.eq(requests), dut.ready.eq(ready)]
        i = AnyConst(range(n))
        m.d.comb += Assume(i < n)

        # The stream rule for the requesters: an offer not taken stays.
        offered = Signal()
        offered_grant = Signal(range(n))
        if self.hold:
            m.d.sync += [offered.eq(dut.valid & ~ready), offered_grant.eq(dut.grant)]
            with m.If(offered):
                m.d.comb += Assume(requests.bit_select(offered_grant, 1))

        m.d.comb += Assert(dut.valid == requests.any())
        with m.If(dut.valid):
            m.d.comb += [Assert(dut.grant < n), Assert(requests.bit_select(dut.grant, 1))]

        # Grants to others while `i` keeps asking.
        others = Signal(range(n + 1))
        granted = dut.valid & (ready if self.hold else 1)
        with m.If(~requests.bit_select(i, 1)):
            m.d.sync += others.eq(0)
        with m.Elif(granted & (dut.grant == i)):
            m.d.sync += others.eq(0)
        with m.Elif(granted):
            m.d.sync += others.eq(others + 1)
        m.d.comb += Assert(others <= n - 1)
        m.d.comb += Cover((others == n - 1) & granted & (dut.grant == i))

        # Helper invariants (white-box): the arbiter's `last` lies no nearer before `i` than
        # the grants to others allow; its held offer is the one the spec saw.
        if not self.invariants:
            return m
        last = inside.register(dut.grant, init=n - 1)
        ahead = Signal(range(2 * n + 1))        # requesters from `last` (excluded) to `i`
        m.d.comb += ahead.eq(Mux(i > last, i - last, i + n - last))
        m.d.comb += Assert(last < n)
        if self.hold:
            held_grant = inside.register(dut.grant, init=0)
            held = inside.register(dut.valid & ~dut.ready)
            m.d.comb += [Assert(held == offered),
                         Assert(~held | (held_grant == offered_grant))]
            # an offer held to another: it goes first, then the others from it to `i`
            beyond = Signal(range(2 * n + 1))
            m.d.comb += beyond.eq(Mux(i > held_grant, i - held_grant, i + n - held_grant))
            with m.If(requests.bit_select(i, 1)):
                with m.If(held & (held_grant != i)):
                    m.d.comb += Assert(others + 1 + beyond <= n)
                with m.Else():
                    m.d.comb += Assert(others + ahead <= n)
        else:
            with m.If(requests.bit_select(i, 1)):
                m.d.comb += Assert(others + ahead <= n)
        return m


class AllocatorSpec(Elaboratable):
    """``module`` is ``wse.rtl.allocator`` or a mutant of it; ``pairs`` as the router's."""

    def __init__(self, module, n=5, *, u_turns=True, invariants=True):
        self.module, self.n, self.u_turns = module, n, u_turns
        self.invariants = invariants

    def elaborate(self, platform):
        m = Module()
        n = self.n
        pairs = {(i, o) for i in range(n) for o in range(n) if self.u_turns or i != o}
        dut = self.module.SwitchAllocator(n, pairs=pairs)
        inside = Inside(dut, platform)
        m.submodules.dut = inside.module
        requests = [AnySeq(n) for _ in range(n)]
        free = AnySeq(n)
        m.d.comb += [dut.free.eq(free), *(dut.requests[k].eq(requests[k]) for k in range(n))]
        for o in range(n):
            asking = Signal(n, name=f"asking{o}")
            m.d.comb += asking.eq(Cat(requests[k][o] if (k, o) in pairs else 0
                                      for k in range(n)))
            grant = Value.cast(dut.grants[o])
            m.d.comb += [
                Assert((grant & (grant - 1)) == 0),                 # one-hot or zero
                Assert((grant & ~asking) == 0),                     # only to a requester
                Assert((grant != 0) == (free[o] & asking.any())),   # work conserving
            ]
            for k in range(n):
                m.d.comb += Assert(dut.served[k][o] == dut.grants[o][k])

        # Fairness of an arbitrary output `o` to an arbitrary input `i`.
        i, o = AnyConst(range(n)), AnyConst(range(n))
        m.d.comb += [Assume(i < n), Assume(o < n)]
        if not self.u_turns:
            m.d.comb += Assume(i != o)
        wants = Array(Array(requests[k][p] for p in range(n)) for k in range(n))[i][o]
        grants = Array(Value.cast(dut.grants[p]) for p in range(n))[o]
        others = Signal(range(n + 1))
        mine = (grants >> i)[0]
        with m.If(~wants | mine):
            m.d.sync += others.eq(0)
        with m.Elif(grants != 0):
            m.d.sync += others.eq(others + 1)
        m.d.comb += Assert(others <= n - 1)
        m.d.comb += Cover((others == n - 1) & mine)

        # Helper invariants (white-box): each output's `after` mask is a thermometer (the
        # inputs above its last grant), and `i` has no more inputs before it than the grants to
        # others allow.
        if not self.invariants:
            return m
        regs = {lhs.name: lhs for lhs, _ in inside.assigned("sync")}
        after = [regs[f"o{p}_after"] for p in range(n)]
        full = (1 << n) - 1
        for p in range(n):
            m.d.comb += Assert(after[p].matches(*(full & ~((1 << k) - 1) for k in range(n + 1))))
        mask = Array(after)[o]
        ahead = Signal(range(2 * n + 1))
        below = Signal(n)
        m.d.comb += below.eq((1 << i) - 1)
        with m.If((mask >> i)[0]):
            m.d.comb += ahead.eq(sum((mask & below)[k] for k in range(n)))
        with m.Else():
            m.d.comb += ahead.eq(i + sum((mask & ~below)[k] for k in range(n)))
        with m.If(wants):
            m.d.comb += Assert(others + ahead <= n - 1)
        return m
