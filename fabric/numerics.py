"""The golden arithmetic: numpy twins of :mod:`rtl.numfmt`, bit for bit.

Pure functions over ``int64`` arrays: fixed-point values, or for :class:`~rtl.bfloat.BFloat16`
bit patterns (operands bf16 in the low 16 bits, products and accumulators binary32), so that
programs, wavelets and models carry both formats the same way. The RTL's number format object
selects the rules. Fixed point: every format here fits ``int64`` (products are at most 64 bits
and are saturated before they could wrap). bf16: numpy ``float32`` arithmetic (IEEE 754, round
to nearest even, subnormals kept) and ``ml_dtypes.bfloat16`` for the rounding to bf16, every
NaN made the canonical one (``docs/numerics.md``).
"""

import ml_dtypes
import numpy as np

from wse.rtl.bfloat import CANONICAL_NAN16, CANONICAL_NAN32, BFloat16
from wse.rtl.numfmt import FixedPoint
from wse.rtl.validate import index_text, int_array

__all__ = ["operands", "check_operands", "is_zero", "multiply", "accumulate", "requantise", "axpy",
           "encode", "decode", "widen", "as_float32", "from_float32", "to_wire", "from_wire"]


def _fixed(fmt):
    if not isinstance(fmt, (FixedPoint, BFloat16)):
        raise TypeError(f"No golden arithmetic for number format {fmt!r}")
    return fmt


# -- bf16 and binary32 bit patterns ------------------------------------------------------------

def widen(bits):
    """bf16 bit patterns -> the binary32 bit patterns of the same values (``int64``): the 16
    bits as the top half, exactly (every bf16 value is a binary32 value)."""
    return (np.asarray(bits, dtype=np.int64) & 0xFFFF) << 16


def as_float32(bits, operand=False):
    """``float32`` values of binary32 bit patterns (``operand``: of bf16 bit patterns)."""
    bits = widen(bits) if operand else np.asarray(bits, dtype=np.int64)
    return (bits & 0xFFFF_FFFF).astype(np.uint32).view(np.float32)


def from_float32(values, operand=False):
    """Bit patterns (``int64``) of ``float32`` ``values``, every NaN the canonical one;
    ``operand``: rounded to bf16 (nearest even, by ``ml_dtypes``) and its 16-bit patterns."""
    values = np.asarray(values, dtype=np.float32)
    nan = np.isnan(values)
    if operand:
        bits = values.astype(ml_dtypes.bfloat16).view(np.uint16).astype(np.int64)
        return np.where(nan, CANONICAL_NAN16, bits)
    return np.where(nan, CANONICAL_NAN32, values.view(np.uint32).astype(np.int64))


def encode(fmt, values, what="operand"):
    """Numbers as the operands ``fmt`` carries: ``(int64 array, inexact)``. Fixed point: the
    values themselves, checked (:func:`check_operands`; ``inexact`` is 0). bf16: any real
    numbers rounded to bf16 bit patterns; ``inexact`` counts those that were not exactly
    representable (NaN counts as exact)."""
    fmt = _fixed(fmt)
    if not fmt.is_float:
        return check_operands(fmt, values, what), 0
    values = np.asarray(values)
    if not (np.issubdtype(values.dtype, np.floating) or np.issubdtype(values.dtype, np.integer)
            or values.dtype == ml_dtypes.bfloat16):
        raise ValueError(f"{what} must hold numbers, not {values.dtype}")
    odd, sticky = _round_to_odd32(values)
    bits = from_float32(odd, operand=True)
    back = as_float32(bits, operand=True)
    inexact = int(np.count_nonzero((sticky | (back != odd)) & ~np.isnan(odd)))
    return bits, inexact


def _round_to_odd32(values):
    """``(float32 array, sticky)``: ``values`` rounded to binary32 *to odd* (truncated, and the
    last bit set where anything was lost; ``sticky`` marks those), from the values exactly as
    given, whatever their dtype. Binary32 has 24 significant bits, more than bf16's 8 plus
    two, so rounding this to bf16 to nearest even rounds the original value once; a value
    beyond binary32's range becomes the largest finite one of its sign (which bf16 rounds to
    ``±inf``), NaN stays NaN."""
    values = np.asarray(values)
    if values.dtype.kind == "f" and values.dtype.itemsize <= 4 or values.dtype == \
            ml_dtypes.bfloat16:
        return values.astype(np.float32), np.zeros(values.shape, dtype=bool)
    if values.dtype.kind in "iu":       # beyond 2**53 a float64 would round: split it first
        values = values.astype(np.uint64 if values.dtype.kind == "u" else np.int64)
        high = (values >> 32).astype(np.float64) * 2.0**32
        low = (values & 0xFFFF_FFFF).astype(np.float64)
        wide = high + low                               # rounded once; the error exactly:
        back = wide - high
        error = (high - (wide - back)) + (low - back)   # (Knuth's two-sum)
        wide, lost = _to_odd(wide, error, np.float64)
    else:
        wide, lost = values, np.zeros(values.shape, dtype=bool)
    with np.errstate(over="ignore", invalid="ignore"):  # beyond binary32: the largest finite
        narrow = wide.astype(np.float32)                # one of its sign, below
        error = np.where(np.isfinite(narrow), wide - narrow.astype(wide.dtype), wide)
    narrow = np.where(np.isinf(narrow) & np.isfinite(wide),
                      np.copysign(np.finfo(np.float32).max, wide).astype(np.float32), narrow)
    odd, sticky = _to_odd(narrow, np.where(np.isfinite(wide), error, 0), np.float32)
    return odd, sticky | lost


def _to_odd(rounded, error, dtype):
    """``rounded`` (of ``dtype``, nearest even) made round-to-odd, given the sign of the exact
    value minus it (``error``): where it was inexact and its last bit is 0, the neighbour on the
    value's side. Returns ``(values, inexact)``."""
    rounded = np.asarray(rounded, dtype=dtype)
    uint = np.uint64 if dtype == np.float64 else np.uint32
    inexact = np.asarray(error != 0) & np.isfinite(rounded)
    even = (rounded.view(uint) & uint(1)) == 0
    toward = np.where(error > 0, np.inf, -np.inf).astype(dtype)
    with np.errstate(over="ignore"):     # the largest finite ones are odd: never moved
        return np.where(inexact & even, np.nextafter(rounded, toward), rounded), inexact


def decode(fmt, values, raw=False):
    """What ``fmt``'s results mean: fixed point, the ``int64`` values themselves; bf16, the
    ``float32`` values of bf16 results (``raw``: of binary32 totals)."""
    fmt = _fixed(fmt)
    if not fmt.is_float:
        return np.asarray(values, dtype=np.int64)
    return as_float32(values, operand=not raw)


def to_wire(fmt, values, acc=False):
    """``values`` (operands, or accumulators with ``acc``) as the signed numbers the wavelet
    fields carry (a LOAD's or an AXPY's signed 16 bits, a psum's or a reply's signed 32 bits):
    fixed point, themselves; bf16, their bit patterns read as two's complement."""
    values = np.asarray(values, dtype=np.int64)
    if not _fixed(fmt).is_float:
        return values
    bits = 32 if acc else 16
    values = values & ((1 << bits) - 1)
    return np.where(values >> (bits - 1) != 0, values - (1 << bits), values)


def from_wire(fmt, values, acc=False):
    """The inverse of :func:`to_wire` for the words the core sends or takes: fixed point, the
    low ``width`` (``acc``: ``acc_width``) bits sign-extended, as the core reads them; bf16, the
    low 16 (``acc``: 32) bits as a bit pattern."""
    fmt = _fixed(fmt)
    values = np.asarray(values, dtype=np.int64)
    if fmt.is_float:
        return values & (0xFFFF_FFFF if acc else 0xFFFF)
    bits = fmt.acc_width if acc else fmt.width
    values = values & ((1 << bits) - 1)
    return np.where(values >> (bits - 1) != 0, values - (1 << bits), values)


def is_zero(fmt, values):
    """Which ``values`` (operands) are zero: the ones the core skips (bf16: ``±0``)."""
    fmt = _fixed(fmt)
    values = np.asarray(values, dtype=np.int64)
    return (values & 0x7FFF) == 0 if fmt.is_float else values == 0


def operands(fmt, values, what, ndim=2):
    """An ``int64`` array of operands of ``fmt``; ``ValueError`` naming the first value outside
    the operand range, where it is, and the range. bf16 operands are bit patterns
    (:func:`~fabric.numerics.encode` makes them from numbers), and ``-0`` becomes ``+0``: both
    are zeros the core skips, so nothing computed differs, and a zero is one pattern for the
    compiler and the models."""
    if fmt.is_float and np.issubdtype(np.asarray(values).dtype, np.floating):
        raise ValueError(f"{what} must be bf16 bit patterns (integers 0..65535: "
                         f"fabric.numerics.encode makes them from numbers), not "
                         f"{np.asarray(values).dtype} values")
    a = int_array(values, what, ndim)
    if fmt.is_float:
        lo, hi, kind = 0, 0xFFFF, "bf16 bit patterns"
    else:
        lo, hi, kind = fmt.operand_min, fmt.operand_max, f"the operand range of int{fmt.width}"
    bad = (a < lo) | (a > hi)
    if bad.any():
        at = np.argwhere(bad)[0]
        raise ValueError(f"{what} must fit in {kind} ({lo}..{hi}), not {int(a[tuple(at)])} "
                         f"(at {index_text(at)})")
    if fmt.is_float:
        a = np.where(a == 0x8000, 0, a)
    return a


def check_operands(fmt, values, what="operand"):
    """``values`` as ``int64``; ``ValueError`` naming ``what`` if any does not fit an operand
    (bf16: a 16-bit pattern)."""
    fmt = _fixed(fmt)
    values = np.asarray(values, dtype=np.int64) if np.asarray(values).size else \
        np.zeros(np.shape(values), dtype=np.int64)
    if fmt.is_float:
        bad = (values < 0) | (values > 0xFFFF)
        if bad.any():
            raise ValueError(f"{what} must be bf16 bit patterns (0..0xFFFF), "
                             f"not {int(values[bad].flat[0])}")
        return values
    bad = (values < fmt.operand_min) | (values > fmt.operand_max)
    if bad.any():
        raise ValueError(f"{what} must fit in int{fmt.width} "
                         f"({fmt.operand_min}..{fmt.operand_max}), not {int(values[bad].flat[0])}")
    return values


def multiply(fmt, a, b):
    """Exact products of operands (bf16: the binary32 product, rounded only when it is
    subnormal or overflows)."""
    if _fixed(fmt).is_float:
        with np.errstate(all="ignore"):
            return from_float32(as_float32(a, True) * as_float32(b, True))
    return np.asarray(a, dtype=np.int64) * np.asarray(b, dtype=np.int64)


def _float_result(before, after):
    """``(bits, overflow)`` of a binary32 result: overflow where a finite ``before`` (an
    accumulator) became infinite or NaN."""
    return from_float32(after), np.isfinite(before) & ~np.isfinite(after)


def accumulate(fmt, acc, product):
    """``(sum, overflow)``: ``acc + product`` saturated to the accumulator range (bf16: the
    binary32 sum; overflow where a finite accumulator became ``±inf`` or NaN)."""
    fmt = _fixed(fmt)
    if fmt.is_float:
        acc = as_float32(acc)
        with np.errstate(all="ignore"):
            return _float_result(acc, acc + as_float32(product))
    total = np.asarray(acc, dtype=np.int64) + np.asarray(product, dtype=np.int64)
    overflow = (total > fmt.acc_max) | (total < fmt.acc_min)
    return np.clip(total, fmt.acc_min, fmt.acc_max), overflow


def requantise(fmt, acc):
    """``(operand, overflow)``: shift right by ``frac_bits`` rounding half to even, saturate
    (bf16: the binary32 accumulator rounded to bf16, nearest even; overflow where a finite
    accumulator rounded to ``±inf``)."""
    fmt = _fixed(fmt)
    if fmt.is_float:
        acc = as_float32(acc)
        bits = from_float32(acc, operand=True)
        return bits, np.isfinite(acc) & ~np.isfinite(as_float32(bits, operand=True))
    acc = np.asarray(acc, dtype=np.int64)
    f = fmt.frac_bits
    if f:
        floor = acc >> f
        rest = acc & ((1 << f) - 1)
        half = 1 << (f - 1)
        rounded = floor + ((rest > half) | ((rest == half) & (floor & 1 == 1)))
    else:
        rounded = acc
    overflow = (rounded > fmt.operand_max) | (rounded < fmt.operand_min)
    return np.clip(rounded, fmt.operand_min, fmt.operand_max), overflow


def one(fmt):
    """The operand the core reads in every token of :data:`~rtl.isa.ONES_SLOT`: 1.0 (fixed
    point: ``1 << frac_bits``, saturated to the operand range when ``frac_bits`` leaves no
    integer bit; bf16: ``0x3F80``)."""
    fmt = _fixed(fmt)
    return 0x3F80 if fmt.is_float else min(1 << fmt.frac_bits, fmt.operand_max)


def relu(fmt, values):
    """``max(value, 0)`` of operands as the core applies it for a CR_ACT: every value whose
    sign bit is set becomes ``+0`` (bf16: ``-0`` and negative NaNs as well)."""
    fmt = _fixed(fmt)
    values = np.asarray(values, dtype=np.int64)
    negative = (values & 0x8000) != 0 if fmt.is_float else values < 0
    return np.where(negative, 0, values)


def axpy(fmt, acc, weight, x):
    """One weight's AXPY over a row of activations, as the core does it.

    ``acc[t] += weight * x[t]`` for every ``t`` with ``weight`` and ``x[t]`` nonzero, one
    saturating accumulation at a time. Returns ``(acc, overflow, issued, skipped_weight,
    skipped_act)``: the new accumulators, whether any accumulation saturated, and how many
    multiplies were issued or skipped for a zero weight or a zero activation.
    """
    acc = np.array(acc, dtype=np.int64)
    x = np.asarray(x, dtype=np.int64)
    if is_zero(fmt, weight):
        return acc, False, 0, x.size, 0
    live = ~is_zero(fmt, x)
    acc[live], overflow = accumulate(fmt, acc[live], multiply(fmt, weight, x[live]))
    return acc, bool(overflow.any()), int(live.sum()), 0, int((~live).sum())
