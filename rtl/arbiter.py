"""Round-robin arbitration for one stream output."""


from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from . import validate

__all__ = ["RoundRobin"]


class RoundRobin(wiring.Component):
    """Round-robin arbiter whose grant stays put while the granted transfer is stalled.

    The grant goes to the first requester after the one that last completed a transfer, so every
    persistent requester is served within ``count`` transfers. Once ``valid`` is offered and
    ``ready`` is low, the same grant is held on the next cycle (the stream rule that an offered
    payload stays until taken), so the granted requester must keep requesting until it is served.

    Latency: combinational (``grant`` follows ``requests`` in the same cycle).

    With ``hold=False`` the grant is not held: while the output does not take the offer, the
    grant moves on to the next requester every cycle, so a consumer that takes some requesters
    and not others (by looking at the payload) is offered each in turn. That breaks the stream
    rule and is meant for an internal choice whose consumer knows it (the route state's pick
    among update requests).

    Parameters
    ----------
    count : int
        Number of requesters, at least 1.
    hold : bool
        Hold the grant while the offer is not taken (default).

    Members
    -------
    requests : In(count)
        One bit per requester.
    ready : In(1)
        The output took the granted payload this cycle (only looked at while ``valid``).
    grant : Out(range(count))
        Index of the granted requester; meaningful while ``valid``.
    valid : Out(1)
        Some requester is granted.
    """

    def __init__(self, count, *, hold=True):
        self._count = validate.count("Requester count", count)
        self._hold = bool(hold)
        super().__init__({
            "requests": In(count),
            "ready":    In(1),
            "grant":    Out(range(count)),
            "valid":    Out(1),
        })

    @property
    def count(self):
        return self._count

    def elaborate(self, platform):
        m = Module()
        n = self._count

        last = Signal(range(n), init=n - 1)     # last requester served
        held = Signal()                         # a transfer was offered and not taken
        held_grant = Signal(range(n))

        with m.If(held):
            m.d.comb += self.grant.eq(held_grant)
        with m.Else():
            with m.Switch(last):
                for start in range(n):
                    with m.Case(start):
                        # Later assignments win: walk the order backwards so the first
                        # requester after `start` is the one that sticks.
                        for index in reversed([(start + 1 + k) % n for k in range(n)]):
                            with m.If(self.requests[index]):
                                m.d.comb += self.grant.eq(index)
        m.d.comb += self.valid.eq(held | self.requests.any())

        if self._hold:
            m.d.sync += [
                held.eq(self.valid & ~self.ready),
                held_grant.eq(self.grant),
            ]
            with m.If(self.valid & self.ready):
                m.d.sync += last.eq(self.grant)
        else:
            with m.If(self.valid):
                m.d.sync += last.eq(self.grant)
        return m
