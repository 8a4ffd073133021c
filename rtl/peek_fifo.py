"""A small synchronous FIFO whose first two entries can both be read, and both taken at once."""

from amaranth.hdl import Array, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .validate import integer

__all__ = ["PeekFIFO"]


class PeekFIFO(wiring.Component):
    """First-word-fall-through FIFO of ``depth`` registers that also shows its second entry.

    The core's dispatcher uses it to see the command behind the one it runs: a carriage return
    right behind an AXPY is done in the AXPY's last cycle (``docs/pe.md``).

    Members
    -------
    w_data, w_en, w_rdy
        Write side, one entry a cycle (``w_rdy``: not full).
    r_data, r_rdy
        The head and whether there is one.
    r_data1, r_rdy1
        The entry behind the head and whether there is one.
    r_en, r_en2
        Take the head; take the head and the entry behind it (needs ``r_rdy1``).
    level : Out
        Entries held.
    """

    def __init__(self, width, depth):
        depth = integer("depth", depth, 2)
        self.width, self.depth = width, depth
        super().__init__({
            "w_data": In(width), "w_en": In(1), "w_rdy": Out(1),
            "r_data": Out(width), "r_rdy": Out(1),
            "r_data1": Out(width), "r_rdy1": Out(1),
            "r_en": In(1), "r_en2": In(1),
            "level": Out(range(depth + 1)),
        })

    def elaborate(self, platform):
        m = Module()
        D = self.depth
        store = Array(Signal(self.width, name=f"entry{k}") for k in range(D))
        rd = Signal(range(D))
        wr = Signal(range(D))

        def after(pointer, steps):
            total = pointer + steps
            return Mux(total >= D, total - D, total)

        taken = Signal(range(3))
        m.d.comb += [
            self.r_rdy.eq(self.level >= 1), self.r_rdy1.eq(self.level >= 2),
            self.w_rdy.eq(self.level < D),
            self.r_data.eq(store[rd]), self.r_data1.eq(store[after(rd, 1)]),
            taken.eq(Mux(self.r_en2 & self.r_rdy1, 2, self.r_en & self.r_rdy)),
        ]
        written = self.w_en & self.w_rdy
        with m.If(written):
            m.d.sync += [store[wr].eq(self.w_data), wr.eq(after(wr, 1))]
        m.d.sync += [rd.eq(after(rd, taken)), self.level.eq(self.level + written - taken)]
        return m
