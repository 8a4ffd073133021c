"""The router's switch allocator: each output picks one of the inputs that ask for it."""

from amaranth.hdl import Cat, Module
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from .arbiter import RoundRobin
from .validate import count

__all__ = ["SwitchAllocator"]


class SwitchAllocator(wiring.Component):
    """Separable allocation for ``n`` inputs and ``n`` outputs.

    Every input presents one head and the outputs it wants (``requests[i]``, a bit per
    output: several for a multicast). Every output that is ``free`` grants one of its
    requesters, round-robin from the one after its last grant, so each persistent requester is
    served within ``n`` grants. An input may be granted by several outputs in one cycle (its
    copies leave together). Only the ``(input, output)`` ``pairs`` given exist (all by
    default): a request for another is never granted. Combinational: ``grants`` follow
    ``requests`` and ``free`` in the same cycle.

    Members
    -------
    requests : In(ArrayLayout(n, n))
        ``requests[i]``: outputs input ``i`` asks for.
    free : In(n)
        Outputs that can take a wavelet this cycle.
    grants : Out(ArrayLayout(n, n))
        ``grants[o]``: one-hot, the input output ``o`` takes from (zero when none).
    served : Out(ArrayLayout(n, n))
        ``served[i]``: outputs that took input ``i``'s head (the transpose of ``grants``).
    """

    def __init__(self, n=5, *, pairs=None):
        self.n = count("n", n)
        self.pairs = ({(i, o) for i in range(self.n) for o in range(self.n)} if pairs is None
                      else set(pairs))
        super().__init__({
            "requests": In(data.ArrayLayout(self.n, self.n)),
            "free": In(self.n),
            "grants": Out(data.ArrayLayout(self.n, self.n)),
            "served": Out(data.ArrayLayout(self.n, self.n)),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.n
        for o in range(n):
            arbiter = m.submodules[f"output{o}"] = RoundRobin(n, hold=False)
            m.d.comb += [
                arbiter.requests.eq(Cat(self.requests[i][o] if (i, o) in self.pairs else 0
                                        for i in range(n)) & self.free[o].replicate(n)),
                arbiter.ready.eq(1),
            ]
            for i in range(n):
                grant = arbiter.valid & (arbiter.grant == i)
                m.d.comb += [self.grants[o][i].eq(grant), self.served[i][o].eq(grant)]
        return m
