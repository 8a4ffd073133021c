"""A small synchronous FIFO whose first two entries can both be read, and both taken at once."""

from amaranth.hdl import Array, Module, Mux, Shape, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .validate import integer

__all__ = ["PeekSignature", "PeekFIFO"]


class PeekSignature(wiring.Signature):
    """The read side of a :class:`PeekFIFO`, as its producer sees it.

    Members
    -------
    head, valid : Out
        The first entry and whether there is one.
    next, next_valid : Out
        The entry behind it and whether there is one.
    take : In(1)
        Take the head.
    take2 : In(1)
        Take the head and the entry behind it (needs ``next_valid``; wins over ``take``).
    """

    def __init__(self, shape):
        self.shape = shape
        super().__init__({
            "head": Out(shape), "valid": Out(1),
            "next": Out(shape), "next_valid": Out(1),
            "take": In(1), "take2": In(1),
        })


class PeekFIFO(wiring.Component):
    """First-word-fall-through FIFO of ``depth`` registers that also shows its second entry.

    The core's dispatcher uses it to see the command behind the one it runs: a carriage return
    right behind an AXPY is done in the AXPY's last cycle (``docs/pe.md``). An entry written in
    one cycle is readable in the next; one entry in a cycle, one or two out.

    Members
    -------
    w : In(stream.Signature(shape))
        Write side (``ready``: not full).
    r : Out(PeekSignature(shape))
        Read side: the first two entries.
    level : Out
        Entries held.
    """

    def __init__(self, shape, depth):
        depth = integer("depth", depth, 2)
        self.shape, self.depth = shape, depth
        super().__init__({
            "w": In(stream.Signature(shape)),
            "r": Out(PeekSignature(shape)),
            "level": Out(range(depth + 1)),
        })

    def elaborate(self, platform):
        m = Module()
        D = self.depth
        width = Shape.cast(self.shape).width
        store = Array(Signal(width, name=f"entry{k}") for k in range(D))
        rd = Signal(range(D))
        wr = Signal(range(D))

        def after(pointer, steps):
            total = pointer + steps
            return Mux(total >= D, total - D, total)

        taken = Signal(range(3))
        r = self.r
        m.d.comb += [
            r.valid.eq(self.level >= 1), r.next_valid.eq(self.level >= 2),
            self.w.ready.eq(self.level < D),
            r.head.eq(store[rd]), r.next.eq(store[after(rd, 1)]),
            taken.eq(Mux(r.take2 & r.next_valid, 2, r.take & r.valid)),
        ]
        written = self.w.valid & self.w.ready
        # The free entry at ``wr`` takes the payload whether or not it is written (nothing
        # reads it until it is): its enable comes from registers, not from ``w.valid``.
        with m.If(self.w.ready):
            m.d.sync += store[wr].eq(self.w.payload)
        with m.If(written):
            m.d.sync += wr.eq(after(wr, 1))
        m.d.sync += [rd.eq(after(rd, taken)), self.level.eq(self.level + written - taken)]
        return m
