"""Output feature to (result slot, owner row) without a divider: ``o // rows`` and ``o % rows``."""

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .validate import count

__all__ = ["RowSplit"]


class RowSplit(wiring.Component):
    """Splits a carriage return's output feature ``o`` into ``slot = o // rows`` and
    ``owner = o % rows``, exactly, for every ``o`` of ``width`` bits.

    No divider: for a power of two ``rows`` the two are bit slices; otherwise ``slot`` is
    ``o`` times a precomputed reciprocal, shifted (Granlund and Montgomery: with
    ``l = ceil(log2(rows))`` and ``s = width + l``, ``m = ceil(2**s / rows)`` gives
    ``(o * m) >> s == o // rows`` for every ``o < 2**width``), and ``owner = o - slot * rows``,
    a constant multiply by a small number. Combinational (latency 0).

    Parameters
    ----------
    rows : int
        The mesh's row count (at least 1).
    width : int
        Width of ``o``.

    Members
    -------
    o : In(width)
    slot : Out(width)
    owner : Out(range(rows))
    """

    def __init__(self, rows, width):
        self.rows = count("rows", rows)
        self.width = count("width", width)
        super().__init__({"o": In(self.width), "slot": Out(self.width),
                          "owner": Out(range(self.rows))})

    def elaborate(self, platform):
        m = Module()
        rows, width = self.rows, self.width
        shift = (rows - 1).bit_length()
        if rows & (rows - 1) == 0:
            m.d.comb += [self.slot.eq(self.o >> shift), self.owner.eq(self.o[:shift])]
        else:
            s = width + shift
            magic = -(-(1 << s) // rows)          # ceil(2**s / rows), computed at elaboration
            m.d.comb += self.slot.eq((self.o * magic) >> s)
            m.d.comb += self.owner.eq(self.o - self.slot * rows)
        return m
