"""The router's switch allocator: each output picks one of the inputs that ask for it."""

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from . import validate
from .validate import count
from .wavelet import N_PORTS

__all__ = ["SwitchAllocator"]


class SwitchAllocator(wiring.Component):
    """Separable allocation for ``n`` inputs and ``n`` outputs.

    Every input presents one head and the outputs it wants (``requests[i]``, a bit per
    output: several for a multicast). Every output that is ``free`` grants one of its
    requesters, round-robin from the one after its last grant, so each persistent requester is
    served within ``n`` grants. An input may be granted by several outputs in one cycle (its
    copies leave together). Only the ``(input, output)`` ``pairs`` given exist (all by
    default): a request for another is never granted. Combinational: ``grants`` follow
    ``requests`` and ``free`` in the same cycle. Grants are one-hot from the start (a
    thermometer mask over the requests, no index to decode), which keeps the path from a
    request to ``served`` short.

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

    def __init__(self, n=N_PORTS, *, pairs=None):
        self.n = count("n", n)
        self.pairs = validate.pairs("pairs", pairs, self.n, self.n)
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
            req = Signal(n, name=f"o{o}_req")
            m.d.comb += req.eq(Cat(self.requests[i][o] if (i, o) in self.pairs else 0
                                   for i in range(n)) & self.free[o].replicate(n))
            # `after[i]`: input i comes after the last one granted (a thermometer mask).
            after = Signal(n, name=f"o{o}_after", init=(1 << n) - 1)
            high = Signal(n, name=f"o{o}_high")
            m.d.comb += high.eq(req & after)
            pick = Signal(n, name=f"o{o}_pick")
            m.d.comb += pick.eq(high | ((high == 0).replicate(n) & req))
            grant = Signal(n, name=f"o{o}_grant")         # lowest set bit of `pick`
            m.d.comb += grant.eq(Cat(pick[i] & ~pick[:i].any() if i else pick[0]
                                     for i in range(n)))
            with m.If(req.any()):
                # the inputs strictly above the granted one come after it next time
                m.d.sync += after.eq(~((grant << 1) - 1) & ((1 << n) - 1))
            for i in range(n):
                m.d.comb += [self.grants[o][i].eq(grant[i]), self.served[i][o].eq(grant[i])]
        return m
