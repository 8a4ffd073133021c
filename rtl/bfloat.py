"""The floating-point number format: ``bf16 x bf16 -> fp32``, IEEE 754 with round to nearest even.

Operands are bfloat16 bit patterns (``unsigned(16)``), products and accumulators binary32 bit
patterns (``unsigned(32)``). What every operation returns is defined in ``docs/numerics.md``
(the golden twin is :mod:`fabric.numerics`, numpy ``float32`` and ``ml_dtypes.bfloat16``):

* subnormals are kept, operands and results (gradual underflow, as numpy computes);
* a NaN result is always the canonical quiet NaN (``0x7FC00000``, bf16 ``0x7FC0``);
* infinities are IEEE's (``inf - inf`` and ``0 x inf`` are NaN; overflow rounds to ``±inf``);
* ``overflow`` marks an operation that turned a finite accumulator into ``±inf`` or NaN.

The core skips a ``±0`` operand before the MAC, so ``is_zero`` tests the magnitude bits only.
"""

from amaranth.hdl import Cat, Const, Mux, Signal, Value, unsigned

__all__ = ["BFloat16", "CANONICAL_NAN32", "CANONICAL_NAN16", "NEG_ZERO32"]

CANONICAL_NAN32 = 0x7FC0_0000
CANONICAL_NAN16 = 0x7FC0
NEG_ZERO32 = 0x8000_0000


# -- Helpers (combinational) -------------------------------------------------------------------

class _Wires:
    """Intermediate values as combinational signals of module ``m``: a value used more than once
    is then one net. Amaranth's Verilog back end and its simulator copy an expression into each
    of its uses, and these trees reuse their values at every level (one bf16 MAC exported as
    expressions alone was 35 000 lines of Verilog, and a 4x4 mesh of them did not verilate in
    ten minutes). Without a module (``m=None``) values stay expressions: the same logic, for
    callers that use each result once."""

    def __init__(self, m, prefix):
        self.m, self.prefix = m, prefix

    def __call__(self, value, name):
        if self.m is None:
            return value
        value = Value.cast(value)
        wire = Signal(value.shape(), name=f"{self.prefix}_{name}")
        self.m.d.comb += wire.eq(value)
        return wire


_EXPRESSIONS = _Wires(None, "")


def _leading_zeros(value, wire=_EXPRESSIONS):
    """Leading zeros of a nonzero ``value``: a tree of 2:1 choices (depth log2 of the width),
    not a priority chain. A width that is not a power of two is padded below with a 1 and
    zeros, so a zero ``value`` then counts its whole width."""
    width = len(value)
    size = 1 << (width - 1).bit_length()
    if size > width:
        value = Cat(Const(1 << (size - width - 1), size - width), value)

    def tree(v):                                  # (all zero, leading zeros if not)
        if len(v) == 2:
            return wire(~v.any(), "lz_zero"), wire(~v[1], "lz_count")
        lo_zero, lo_count = tree(v[:len(v) // 2])
        hi_zero, hi_count = tree(v[len(v) // 2:])
        return (wire(hi_zero & lo_zero, "lz_zero"),
                wire(Cat(Mux(hi_zero, lo_count, hi_count), hi_zero), "lz_count"))

    return tree(value)[1]


def _shift_right_sticky(value, amount, wire=_EXPRESSIONS):
    """``value >> amount`` (same width) with bit 0 ORed with every 1 bit shifted out (a
    jamming shift: it keeps what rounding to nearest needs to know of the lost bits).
    ``amount`` is unsigned; any amount from the width up shifts everything out."""
    width = len(value)
    bits = width.bit_length()                     # 2 ** bits - 1 >= width
    if len(amount) > bits:
        amount = Mux(amount[bits:].any(), (1 << bits) - 1, amount[:bits])
    amount = wire(amount, "shift")
    kept = (Const((1 << width) - 1, width) << amount)[:width]
    shifted = value >> amount
    return Cat(shifted[0] | (value & ~kept).any(), shifted[1:])


def _round_half_even(kept, guard, sticky):
    """1 where ``kept`` rounds up: above the half, or on it with ``kept`` odd."""
    return guard & (sticky | kept[0])


def _fields(bits, exponent_bits):
    """``(sign, exponent, fraction, is_nan, is_inf)`` of an IEEE bit pattern."""
    fraction = bits[:len(bits) - 1 - exponent_bits]
    exponent = bits[len(fraction):len(bits) - 1]
    special = exponent.all()
    return bits[-1], exponent, fraction, special & fraction.any(), special & ~fraction.any()


class BFloat16:
    """bfloat16 operands, binary32 products and accumulators (``--format bf16``).

    The arithmetic hardware (``multiply``, ``accumulate``, ``requantise``) is combinational; the
    MAC registers a product between ``multiply`` and ``accumulate`` exactly as with
    :class:`~rtl.numfmt.FixedPoint`.
    """

    name = "bf16"
    #: Values are bit patterns of floating-point numbers (``rtl.numfmt.FixedPoint``'s are not).
    is_float = True
    width = 16          # operand bits (an AXPY carries the weight in 16 bits)
    acc_width = 32      # accumulator bits (a psum is one 32-bit word)

    def __repr__(self):
        return "BFloat16()"

    def __eq__(self, other):
        return isinstance(other, BFloat16)

    def __hash__(self):
        return hash("bf16")

    def to_dict(self):
        return {"name": self.name}

    # Ranges --------------------------------------------------------------------------------------

    @property
    def operand_shape(self):
        return unsigned(16)

    @property
    def product_shape(self):
        return unsigned(32)

    @property
    def acc_shape(self):
        return unsigned(32)

    # Hardware ------------------------------------------------------------------------------------

    def operand_from_bits(self, bits):
        """The operand carried in the low bits of a wavelet's data."""
        return bits[:16]

    def acc_from_bits(self, bits):
        """The accumulator value carried in a wavelet's data (a psum)."""
        return bits[:32]

    def operand_word(self, value):
        """An operand as a wavelet's 32-bit data (a READ): zero-extended."""
        return value.as_unsigned()

    def is_zero(self, value):
        """``±0``: the magnitude bits are all zero (a subnormal is not zero)."""
        return value[:15] == 0

    #: 1.0 as an operand's bit pattern (:data:`~rtl.isa.ONES_SLOT`'s value).
    one = 0x3F80

    def relu(self, value):
        """``max(value, 0)`` on the pattern: every value whose sign bit is set (``-0`` and the
        negative NaNs too) becomes ``+0`` (CR_ACT)."""
        return Mux(value[15], 0, value)

    def multiply(self, a, b, *, m=None):
        """The binary32 product of bf16 patterns ``a`` and ``b`` (``product_shape``).

        Each operand's significand is normalised first, before the multiplier (a subnormal's
        leading zeros shifted out, its exponent lowered to match), so the 8 x 8-bit product
        ``p`` lies in ``[2**14, 2**16)``: its top bit alone normalises it, and a normal result
        is exact. A result below the normal range is ``p`` shifted right by an amount
        from the exponents only, then rounded to nearest even (the carry of a round-up into the
        exponent field is the step to the smallest normal). Above the range: ``±inf``.
        With a module ``m``, its intermediate values are signals of ``m`` (:class:`_Wires`).
        """
        wire = _Wires(m, "mul")
        sign_a, exp_a, _, nan_a, inf_a = _fields(a, 8)
        sign_b, exp_b, _, nan_b, inf_b = _fields(b, 8)
        zero_a, zero_b = self.is_zero(a), self.is_zero(b)
        sign = sign_a ^ sign_b

        def normalised(x, exponent):
            """``(significand, exponent)``: 1.f and the true exponent field, subnormals
            shifted up (exponent 1 - shift, down to -6)."""
            significand = Cat(x[:7], exponent != 0)
            shift = _leading_zeros(significand, wire)   # (a zero's is never used)
            return (wire((significand << shift)[:8], "sig"),
                    wire(Mux(exponent == 0, 1, exponent) - shift, "exp"))

        sig_a, e_a = normalised(a, exp_a)
        sig_b, e_b = normalised(b, exp_b)
        p = wire(sig_a * sig_b, "p")                    # 16 bits, top bit 15 or 14
        top = p[15]
        biased = wire(e_a + e_b - 127, "biased")        # result exponent when p[15] is 0
        tiny = Mux(top, biased < 0, biased <= 0)        # below the normal range: exponent <= 0
        huge = Mux(top, biased >= 254, biased >= 255)   # above it: exponent >= 255

        # Normal: exact, the bits of p below its top bit make the fraction.
        fraction = Mux(top, Cat(Const(0, 8), p[:15]), Cat(Const(0, 9), p[:14]))
        normal = Cat(fraction, (biased + top)[:8])

        # Subnormal: the fraction in units of 2**-149 is p * 2**(e_a + e_b - 119) (< 2**23),
        # the shift 128 - e_a - e_b >= 1; two extra bits hold the guard and the sticky bit.
        shifted = wire(_shift_right_sticky(Cat(Const(0, 11), p), (128 - e_a - e_b)[:10], wire),
                       "shifted")
        kept = shifted[2:]
        subnormal = wire(kept + _round_half_even(kept, shifted[1], shifted[0]), "subnormal")

        nan = wire(nan_a | nan_b | (inf_a & zero_b) | (inf_b & zero_a), "nan")
        inf = wire(inf_a | inf_b | huge, "inf")
        magnitude = Mux(zero_a | zero_b, 0,
                        Mux(inf, 0x7F80_0000, Mux(tiny, subnormal, normal)))[:31]
        return Mux(nan, CANONICAL_NAN32, Cat(magnitude, sign))

    def accumulate(self, acc, product, *, m=None):
        """``(sum, overflow)``: the binary32 sum ``acc + product`` rounded to nearest even
        (``acc_shape``), and whether a finite ``acc`` became ``±inf`` or NaN.

        The operand of the larger magnitude is ``big``, the other ``small``, ``d`` the distance
        of their exponents. Two paths, as usual for a floating-point adder, each with one shift:

        * near (a subtraction with ``d <= 1`` and a cancelled top bit): the difference is exact
          in 25 bits; one left shift by ``min(leading zeros, e_big - 1)`` normalises it (the
          limit keeps a result below the normal range subnormal: a stop bit ORed into the
          leading-zero count's input, from the exponent alone). No rounding.
        * far (everything else): ``small`` aligned by a jamming right shift (guard, round and
          sticky bits below the significand), one 28-bit adder, then at most one bit of
          normalisation either way and rounding to nearest even, whose carry runs into the
          exponent field (the next binade, the smallest normal, or ``±inf``).

        An exact zero is ``+0``, unless both operands are ``-0``. With a module ``m``, the
        intermediate values are signals of ``m`` (:class:`_Wires`).
        """
        wire = _Wires(m, "add")
        sign_x, exp_x, frac_x, nan_x, inf_x = _fields(acc, 8)
        sign_y, exp_y, frac_y, nan_y, inf_y = _fields(product, 8)
        subtract = wire(sign_x ^ sign_y, "subtract")

        # Order by magnitude (the bit patterns below the sign order like the values).
        swap = wire(product[:31] > acc[:31], "swap")
        cancel = wire(subtract & (product[:31] == acc[:31]), "cancel")   # x + (-x): exactly +0
        e_x = Mux(exp_x == 0, 1, exp_x)                       # a subnormal's exponent is 1
        e_y = Mux(exp_y == 0, 1, exp_y)
        sig_x, sig_y = Cat(frac_x, exp_x != 0), Cat(frac_y, exp_y != 0)
        e_big = wire(Mux(swap, e_y, e_x), "e_big")
        sig_big = wire(Mux(swap, sig_y, sig_x), "sig_big")
        sig_small = wire(Mux(swap, sig_x, sig_y), "sig_small")
        d = wire(Mux(swap, e_y - e_x, e_x - e_y)[:8], "d")
        sign = Mux(swap, sign_y, sign_x)

        # Near: in half units of big's last place, exact. The hidden bit goes to bit 24 (exponent
        # e_big - shift), or as far as the exponent field 1 (a subnormal: no hidden bit, field 0).
        diff = wire((Cat(Const(0, 1), sig_big)
                     - Mux(d[0], sig_small, Cat(Const(0, 1), sig_small)))[:25], "diff")
        near = wire(subtract & (d[1:] == 0) & ~(d[0] & diff[24]), "near")
        shift = wire(_leading_zeros(diff | (Const(1 << 25, 26) >> e_big)[:25], wire), "lz")
        norm = wire((diff << shift)[:25], "norm")
        near_magnitude = Cat(norm[1:24], (e_big - 1 - shift + norm[24])[:8])

        # Far: 3 bits below the significand. big + small, or big - small (>= 0) as
        # big + ~small + 1 in 28 bits: one adder. The hidden bit of the sum is at 27 (a carry),
        # 26, or 25 (a subtraction that lost its top bit; the exponent is then >= 3), or absent
        # (two subnormals); it goes to bit 27 of ``w``, which has one more bit below.
        small = wire(_shift_right_sticky(Cat(Const(0, 3), sig_small), d, wire), "small")
        total = wire((Cat(Const(0, 3), sig_big)
                      + (Cat(small, Const(0, 1)) ^ subtract.replicate(28)) + subtract)[:28],
                     "total")
        carry, borrow = total[27], wire(subtract & ~total[26], "borrow")     # never both
        w = wire(((Cat(Const(0, 1), total) << borrow) >> carry)[:28], "w")
        exponent = (e_big - 1 + carry - borrow + w[27])[:8]  # the field, before rounding
        # To nearest even in one adder: + 0b0111 + the last kept bit, then drop 4 bits.
        far_magnitude = wire(((Cat(w[:27], exponent) + 0b0111 + w[4]) >> 4)[:32], "far")
        huge = ~subtract & (far_magnitude >= 0x7F80_0000)    # a difference is <= big

        nan = wire(nan_x | nan_y | (inf_x & inf_y & subtract), "nan")
        inf = inf_x | inf_y | huge
        magnitude = Mux(inf, 0x7F80_0000,
                        Mux(cancel, 0, Mux(near, near_magnitude, far_magnitude)))[:31]
        result = Mux(nan, CANONICAL_NAN32, Cat(magnitude, sign & ~cancel))
        return result, ~(nan_x | inf_x) & (nan | inf)

    def requantise(self, acc, *, m=None):
        """``(operand, overflow)``: binary32 ``acc`` rounded to bf16, nearest even.

        On the bit pattern: the top 16 bits, plus 1 when the low 16 are above the half or on
        it with the top odd (the carry crosses into the exponent: subnormal to normal, or to
        ``±inf``). NaN gives the canonical NaN; ``overflow`` where a finite ``acc`` rounded to
        ``±inf``. ``m``: as :meth:`accumulate`'s.
        """
        _, exponent, _, nan, _ = _fields(acc, 8)
        rounded = _Wires(m, "bf16")(
            (acc[16:] + _round_half_even(acc[16:], acc[15], acc[:15].any()))[:16], "rounded")
        return (Mux(nan, CANONICAL_NAN16, rounded),
                ~exponent.all() & rounded[7:15].all())
