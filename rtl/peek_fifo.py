"""A small synchronous FIFO whose first two entries can both be read, and both taken at once."""

from amaranth.hdl import Module, Mux, Shape, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
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
    """First-word-fall-through FIFO of ``depth`` entries that also shows its second entry.

    The core's dispatcher uses it to see the command behind the one it runs: a carriage return
    right behind an AXPY is done in the AXPY's last cycle (``docs/pe.md``). An entry written in
    one cycle is readable in the next; one entry in a cycle, one or two out. The entries are a
    memory with two asynchronous read ports (LUT RAM on an FPGA: on the ECP5 the core's 4 x 38
    bits took 159 flip-flops and their two read multiplexers, now 20 distributed-RAM cells).

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
        store = m.submodules.store = Memory(shape=width, depth=D, init=[])
        head_port = store.read_port(domain="comb")
        next_port = store.read_port(domain="comb")
        write_port = store.write_port()
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
            head_port.addr.eq(rd), next_port.addr.eq(after(rd, 1)),
            r.head.eq(head_port.data), r.next.eq(next_port.data),
            taken.eq(Mux(r.take2 & r.next_valid, 2, r.take & r.valid)),
        ]
        written = self.w.valid & self.w.ready
        # The free entry at ``wr`` takes the payload whether or not it is written (nothing
        # reads it until it is): its enable comes from registers, not from ``w.valid``.
        m.d.comb += [write_port.addr.eq(wr), write_port.data.eq(self.w.payload),
                     write_port.en.eq(self.w.ready)]
        with m.If(written):
            m.d.sync += wr.eq(after(wr, 1))
        m.d.sync += [rd.eq(after(rd, taken)), self.level.eq(self.level + written - taken)]
        return m
