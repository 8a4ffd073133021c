"""The core's arithmetic with constants: output feature to (result slot, owner row) without a
divider (``o // rows``, ``o % rows``), and comparisons with a bound without a carry chain."""

from amaranth.hdl import Cat, Const, Module, Mux, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .validate import count

__all__ = ["RowSplit", "below", "next_word"]


def below(value, bound):
    """``value < bound`` for an unsigned ``value`` and a constant ``bound``, with the bound's low
    zero bits left out: ``bound = m << k`` is ``value >> k < m``, and for ``m == 1`` (a power of
    two) that is "no bit set from ``k`` up", a few LUTs; for an ``m`` of up to 4 bits, no bit set
    above them and a table of the 4. Yosys maps a comparison with a constant
    to a carry chain over every bit (1 place a bit); the core's bounds are mostly powers of two."""
    value = Value.cast(value)
    if value.shape().signed:
        raise TypeError(f"value must be unsigned, not {value!r}")
    if bound <= 0:
        return Const(0)
    if bound >= 1 << len(value):
        return Const(1)
    k = (bound & -bound).bit_length() - 1
    if bound >> k == 1:
        return ~value[k:].any()
    # a small odd part (the counters' 9 words): no bit set above its width, and the bits below
    # it looked up in a table (one LUT4), not a carry chain over every bit
    n = (bound >> k).bit_length()
    if n <= 4:
        table = Const((1 << (bound >> k)) - 1, 1 << n)       # bit i set for i < bound >> k
        return ~value[k + n:].any() & table.bit_select(value[k:k + n], 1)
    return value[k:] < bound >> k


def next_word(address, active, n_tok):
    """The address after a 16-bit ``address`` in a LOAD or a READ (``docs/pe.md``, TOKENS):
    below the counters (``0xFF00``), from a row's last active token (its local token, the low
    ``log2(n_tok)`` bits, ``active - 1`` or more) to the next row's first; elsewhere the next
    word. With every token active that is the next word everywhere."""
    address = Value.cast(address)
    log_tok = n_tok.bit_length() - 1
    if log_tok == 0:
        return address + 1              # one token a row: the next word is the next row's
    token = address[:log_tok]
    jump = (address[8:] != 0xFF) & (token + 1 >= active)
    return Mux(jump, Cat(Const(0, log_tok), address[log_tok:] + 1), address + 1)[:16]


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
