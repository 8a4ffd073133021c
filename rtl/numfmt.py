"""Number formats of the datapath: the one seam between the MAC and the arithmetic it does.

A format says what an operand and an accumulator are, and builds the hardware for the four
things the core does with numbers: test for zero, multiply, accumulate (saturating), and
requantise an accumulator back to an operand. The matching numpy functions live in
:mod:`fabric.numerics`, keyed by the same format object, so RTL and golden model agree bit for
bit. :class:`~rtl.bfloat.BFloat16` (``bf16 x bf16 -> fp32``) is the second class with the same
methods. A format has one name, the one a user gives ``--format`` (``int16``, ``bf16``:
:func:`number_format`), and says whether it is floating point (``fmt.is_float``: values are then
bit patterns) so that no caller asks for its class.
"""


from amaranth.hdl import Const, Mux, signed

from .bfloat import BFloat16
from .validate import integer

__all__ = ["FixedPoint", "BFloat16", "FORMATS", "number_format", "saturate"]

FORMATS = ("int16", "bf16")
"""The names ``--format`` takes."""


def number_format(spec=None):
    """The number format ``spec`` names: ``None`` or ``"int16"`` (:class:`FixedPoint`'s
    default), ``"bf16"`` (:class:`BFloat16`), a format object (returned as it is), or a dict from
    a format's ``to_dict`` (a dict without ``"name"`` is a :class:`FixedPoint`'s fields, the form
    saved before there were two formats; one named ``"fixed"`` is a fixed point's fields as
    written before a format took the name users give it). Anything else is a ``ValueError``
    naming it."""
    if spec is None:
        return FixedPoint()
    if isinstance(spec, (FixedPoint, BFloat16)):
        return spec
    if isinstance(spec, dict):
        spec = dict(spec)
        name = spec.pop("name", None)
        if name == "bf16" and not spec:
            return BFloat16()
        if name in (None, "fixed") or name == f"int{spec.get('width', 16)}":
            return FixedPoint(**spec)
        raise ValueError(f"number format must be one of {', '.join(FORMATS)}, not {spec!r}")
    if spec == "int16":
        return FixedPoint()
    if spec == "bf16":
        return BFloat16()
    raise ValueError(f"number format must be one of {', '.join(FORMATS)}, not {spec!r}")


def saturate(value, width):
    """``(result, overflow)``: the signed ``value`` clamped to ``signed(width)``.

    Without a comparator: ``value`` fits when its bits from ``width - 1`` up are all equal (a
    LUT tree, not a second carry chain after the adder in front of it; the core's adders are
    its critical paths)."""
    top = value.as_signed()[width - 1:]
    fits = top.all() | ~top.any()
    limit = Mux(value[-1], Const(1 << (width - 1), width), Const((1 << (width - 1)) - 1, width))
    return Mux(fits, value[:width], limit).as_signed(), ~fits


class FixedPoint:
    """Two's-complement fixed point: ``width``-bit operands with ``frac_bits`` fraction bits,
    ``acc_width``-bit accumulators.

    Products are exact (``2 * width`` bits); accumulation saturates to ``acc_width`` bits and
    reports overflow; requantisation shifts right by ``frac_bits`` rounding half to even, then
    saturates to ``width`` bits.

    Parameters
    ----------
    width : int
        Operand width, 2..31 (16 by default: int16).
    frac_bits : int
        Fraction bits of operands, ``0 .. width - 1`` (8 by default). Products and accumulators
        carry ``2 * frac_bits``.
    acc_width : int
        Accumulator width, ``2 * width .. 62`` (32 by default; the golden model computes in
        ``int64`` and must not wrap).
    """

    #: Values are two's-complement integers, not bit patterns of floating-point numbers.
    is_float = False

    def __init__(self, *, width=16, frac_bits=8, acc_width=32):
        width = integer("Operand width", width, 2, 31)
        frac_bits = integer("frac_bits", frac_bits, 0, width - 1)
        acc_width = integer("acc_width", acc_width, 2 * width, 62)
        self.width = width
        self.frac_bits = frac_bits
        self.acc_width = acc_width

    @property
    def name(self):
        """``int16`` (``int<width>``): the name ``--format`` takes."""
        return f"int{self.width}"

    def __repr__(self):
        return (f"FixedPoint(width={self.width}, frac_bits={self.frac_bits}, "
                f"acc_width={self.acc_width})")

    def __eq__(self, other):
        return isinstance(other, FixedPoint) and vars(self) == vars(other)

    def __hash__(self):
        return hash((self.width, self.frac_bits, self.acc_width))

    def to_dict(self):
        """The fields as a JSON-able dict (:func:`number_format` rebuilds the format)."""
        return {"name": self.name, "width": self.width, "frac_bits": self.frac_bits,
                "acc_width": self.acc_width}

    # Ranges --------------------------------------------------------------------------------------

    @property
    def operand_shape(self):
        return signed(self.width)

    @property
    def product_shape(self):
        return signed(2 * self.width)

    @property
    def acc_shape(self):
        return signed(self.acc_width)

    @property
    def operand_min(self):
        return -(1 << (self.width - 1))

    @property
    def operand_max(self):
        return (1 << (self.width - 1)) - 1

    @property
    def acc_min(self):
        return -(1 << (self.acc_width - 1))

    @property
    def acc_max(self):
        return (1 << (self.acc_width - 1)) - 1

    # Hardware ------------------------------------------------------------------------------------

    def operand_from_bits(self, bits):
        """The operand carried in the low bits of a wavelet's data."""
        return bits[:self.width].as_signed()

    def acc_from_bits(self, bits):
        """The accumulator value carried in the low bits of a wavelet's data (a psum)."""
        return bits[:self.acc_width].as_signed()

    def operand_word(self, value):
        """An operand as a wavelet's 32-bit data (a READ): sign-extended."""
        return value.as_signed()

    def is_zero(self, value):
        return value == 0

    @property
    def one(self):
        """1.0 as an operand (an ``int``): ``1 << frac_bits``, or the largest operand when
        ``frac_bits`` leaves no integer bit (:data:`~rtl.isa.ONES_SLOT`'s value)."""
        return min(1 << self.frac_bits, self.operand_max)

    def relu(self, value):
        """``max(value, 0)``: a negative operand becomes 0 (CR_ACT)."""
        return Mux(value[-1], 0, value)

    def multiply(self, a, b, *, m=None):
        """The exact product, ``product_shape``. (``m``, the module, is the float format's: a
        fixed-point operation is one expression.)"""
        return (a * b).as_signed()[:2 * self.width].as_signed()

    def accumulate(self, acc, product, *, m=None):
        """``(sum, overflow)``: ``acc + product`` saturated (:func:`saturate`); ``sum`` has
        exactly ``acc_shape`` (so it chains into another ``accumulate`` or a ``requantise``)."""
        return saturate(acc.as_signed() + product.as_signed(), self.acc_width)

    def requantise(self, acc, *, m=None):
        """``(operand, overflow)``: ``acc`` shifted right by ``frac_bits`` (round half to even),
        saturated to ``operand_shape`` (as :func:`saturate` would).

        The rounding increment runs over the operand's ``width`` bits only, not the whole
        ``floor`` (8 carry cells fewer for int16): above them it can only carry out of an
        all-ones low part, which bit ``width - 1`` of the sum shows. With ``h`` the bits of
        ``floor`` above ``width - 1``, ``b`` bit ``width - 1`` and ``r`` that bit of the sum,
        the rounded value fits when ``h`` is all ones and ``b | r`` (the upper part ends at -1,
        or -2 carried up to -1), or ``h`` is all zeros and ``~b & ~r`` (it stays 0); otherwise
        it is past the limit on the side of ``floor``'s sign."""
        acc = acc.as_signed()
        f = self.frac_bits
        if f == 0:
            return saturate(acc, self.width)
        floor = acc >> f
        rest = acc[:f]
        half = 1 << (f - 1)
        up = (rest[f - 1] & (rest[:f - 1] != 0)) | ((rest == half) & floor[0])
        w = self.width
        low = (floor[:w] + up)[:w]
        h, b, r = floor[w:], floor[w - 1], low[w - 1]
        fits = (h.all() & (b | r)) | (~h.any() & ~b & ~r)
        limit = Mux(floor[-1], Const(1 << (w - 1), w), Const((1 << (w - 1)) - 1, w))
        return Mux(fits, low, limit).as_signed(), ~fits
