"""The numbers of training in each datapath format (``docs/host.md``, "Numbers").

What the host does with the datapath's values between the mesh's GEMMs, for both formats
(:func:`wse.rtl.numfmt.number_format`): quantising floats to operands (:func:`quantise`), the
bias and the ReLU of the forward pass, reading results back as floats, and the exact sums of the
gradients.

- **int16** (:class:`~wse.rtl.numfmt.FixedPoint`): operands are the fixed-point integers; a sum
  of gradients is an ``int64`` integer, exact.
- **bf16** (:class:`~wse.rtl.bfloat.BFloat16`): operands are bf16 bit patterns (``int64``,
  ``0..0xFFFF``), the mesh's totals binary32 bit patterns (``docs/numerics.md``). A sum of
  gradients is kept exact as well, as the integer multiple of ``2**-149`` (the smallest binary32
  subnormal: every binary32 and every bf16 value is one) that it is, in :data:`LIMBS` signed
  digits of :data:`DIGIT` bits (``int64 [..., LIMBS]``, value ``sum_k d[k] 2**(DIGIT k - 149)``):
  :func:`exact` builds them from binary32 patterns, ``numpy`` adds them exactly (SwarmX's tree
  does, unchanged), and :func:`exact_float` rounds a sum to ``float64`` once.
"""

import numpy as np

from wse.fabric import numerics
from wse.rtl.bfloat import BFloat16
from wse.rtl.numfmt import FORMATS, FixedPoint

__all__ = ["FORMATS", "format_name", "quantise", "to_float", "add_bias",
           "positive", "canonical_zero", "delta_sum", "gradient_sum", "exact", "exact_sum",
           "exact_float", "DIGIT", "LIMBS", "MAX_ADDENDS"]

#: Bits of a digit of an exact sum, and the digits: ``6 * 48 = 288`` bits hold every binary32
#: value's multiple of ``2**-149`` (below ``2**277``) with its sign.
DIGIT, LIMBS = 48, 6
#: Normalised sums (every digit below ``2**DIGIT`` in magnitude) that may be added before a
#: digit could leave ``int64``: a batch's tokens, or SwarmX's systems (a batch is at most 1438).
MAX_ADDENDS = 1 << (63 - DIGIT)
_ULP = -149                 # the exponent of a digit's unit


def format_name(fmt):
    """``"int16"`` or ``"bf16"`` (:data:`FORMATS`) for those formats, else the format's repr."""
    return fmt.name if fmt in (FixedPoint(), BFloat16()) else repr(fmt)


def quantise(fmt, values):
    """Float values to ``fmt``'s operands: ``(int64 array, beyond)``.

    Fixed point: scale by ``2**frac_bits``, round half to even, saturate; ``beyond`` counts the
    saturated. bf16: the values as given rounded once to bf16, to nearest even
    (:func:`fabric.numerics.encode`), a ``±0`` made ``+0`` (the zero the mesh skips);
    ``beyond`` counts the finite values that became ``±inf``."""
    if fmt.is_float:
        values = np.asarray(values)
        bits, _ = numerics.encode(fmt, values)
        finite = np.isfinite(values) if values.dtype.kind == "f" else np.ones(values.shape, bool)
        beyond = finite & ~np.isfinite(numerics.as_float32(bits, operand=True))
        return canonical_zero(fmt, bits), int(np.count_nonzero(beyond))
    scaled = np.rint(np.asarray(values, dtype=np.float64) * (1 << fmt.frac_bits))
    clipped = np.clip(scaled, fmt.operand_min, fmt.operand_max)
    return clipped.astype(np.int64), int(np.count_nonzero(clipped != scaled))


def to_float(fmt, operands):
    """``float64`` values of ``fmt``'s operands (the logits, for the loss)."""
    if fmt.is_float:
        return numerics.as_float32(operands, operand=True).astype(np.float64)
    return np.asarray(operands).astype(np.float64) / (1 << fmt.frac_bits)


def add_bias(fmt, Z, b):
    """``(Y, overflow)``: ``Y[o, t] = Z[o, t] + b[o]`` in the datapath. Fixed point: the exact
    sum saturated to an operand, ``overflow`` where it saturated. bf16: ``bf(fl(Z + b))``, the
    sum rounded to binary32 and then to bf16 (the bias added as one more addend of the total,
    then requantised: :func:`fabric.numerics.accumulate`, :func:`~fabric.numerics.requantise`);
    ``overflow`` where a finite value became ``±inf`` or NaN."""
    Z, b = np.asarray(Z, dtype=np.int64), np.asarray(b, dtype=np.int64)[:, None]
    if fmt.is_float:
        total, over = numerics.accumulate(fmt, numerics.widen(Z), numerics.widen(b))
        Y, rounded = numerics.requantise(fmt, total)
        return canonical_zero(fmt, Y), bool(over.any() or rounded.any())
    total = Z + b
    Y = np.clip(total, fmt.operand_min, fmt.operand_max)
    return Y, bool((Y != total).any())


def positive(fmt, values):
    """Where operands are above zero (the ReLU's gate; a NaN is not)."""
    if fmt.is_float:
        return numerics.as_float32(values, operand=True) > 0
    return np.asarray(values) > 0


def canonical_zero(fmt, values):
    """``values`` with bf16's ``-0`` made ``+0`` (fixed point: as they are)."""
    values = np.asarray(values, dtype=np.int64)
    if fmt.is_float:
        return np.where(numerics.is_zero(fmt, values), 0, values)
    return values


def delta_sum(fmt, dY):
    """``db = sum_t dY[:, t]``, exactly: ``int64`` (fixed point) or an exact sum (bf16)."""
    if fmt.is_float:
        return exact_sum(numerics.widen(dY), axis=1)
    return np.asarray(dY, dtype=np.int64).sum(axis=1)


def gradient_sum(fmt, totals):
    """The mesh's gradient totals as SwarmX adds them: fixed point, the ``int64`` totals;
    bf16, the binary32 totals as exact sums (:func:`exact`)."""
    return exact(totals) if fmt.is_float else np.asarray(totals, dtype=np.int64)


# -- exact sums of binary32 values ----------------------------------------------------------------

def exact(bits):
    """Binary32 bit patterns (any shape) -> their exact values, ``int64 [..., LIMBS]`` digits
    (normalised: every digit in ``0 .. 2**DIGIT - 1`` but the sign's). ``ValueError`` if any
    is ``±inf`` or NaN (an overflowed total has no exact value)."""
    b = np.asarray(bits, dtype=np.int64) & 0xFFFF_FFFF
    exponent = (b >> 23) & 0xFF
    bad = int(np.count_nonzero(exponent == 0xFF))
    if bad:
        raise ValueError(f"{bad} of {b.size} binary32 values are not finite (inf or NaN)")
    fraction = b & 0x7F_FFFF
    m = np.where(exponent > 0, fraction | (1 << 23), fraction)
    shift = np.maximum(exponent - 1, 0)             # the value is m * 2**(shift - 149)
    k, r = np.divmod(shift, DIGIT)
    low = (m & ((np.int64(1) << (DIGIT - r)) - 1)) << r
    high = m >> (DIGIT - r)
    sign = np.where(b >> 31 != 0, -1, 1)
    digits = np.zeros(b.shape + (LIMBS + 1,), dtype=np.int64)
    np.put_along_axis(digits, k[..., None], (sign * low)[..., None], axis=-1)
    np.put_along_axis(digits, k[..., None] + 1, (sign * high)[..., None], axis=-1)
    return normalise(digits[..., :LIMBS])           # digit LIMBS is zero: values < 2**277


def exact_sum(bits, axis):
    """The exact sums of binary32 bit patterns along ``axis`` (normalised digits)."""
    digits = exact(bits)
    n = digits.shape[axis % (digits.ndim - 1)]
    if n > MAX_ADDENDS:
        raise ValueError(f"an exact sum takes at most {MAX_ADDENDS} addends at once, not {n}")
    return normalise(digits.sum(axis=axis % (digits.ndim - 1)))


def normalise(digits):
    """The same sums with the carries propagated: every digit but the last in
    ``0 .. 2**DIGIT - 1``, the last signed (so each sum has one form)."""
    d = np.array(digits, dtype=np.int64)
    if d.shape[-1:] != (LIMBS,):
        raise ValueError(f"exact sums have {LIMBS} digits on their last axis, not shape "
                         f"{d.shape}")
    for k in range(LIMBS - 1):
        carry = d[..., k] >> DIGIT
        d[..., k] -= carry << DIGIT
        d[..., k + 1] += carry
    return d


def exact_float(digits):
    """Exact sums -> ``float64``, each rounded once to nearest even."""
    d = normalise(digits)
    negative = d[..., -1] < 0
    d = normalise(np.where(negative[..., None], -d, d))     # magnitudes: every digit >= 0
    value = np.zeros(d.shape[:-1])
    for k in reversed(range(LIMBS)):    # exact while the magnitude has <= 53 significant bits
        value = value * float(1 << DIGIT) + d[..., k]
    live = d != 0
    top = LIMBS - 1 - np.argmax(live[..., ::-1], axis=-1)
    bottom = np.argmax(live, axis=-1)
    d_top = np.take_along_axis(d, top[..., None], axis=-1)[..., 0]
    d_bottom = np.take_along_axis(d, bottom[..., None], axis=-1)[..., 0]
    highest = DIGIT * top + np.frexp(d_top.astype(np.float64))[1]
    lowest = DIGIT * bottom + np.frexp((d_bottom & -d_bottom).astype(np.float64))[1]
    for i in zip(*np.nonzero(live.any(axis=-1) & (highest - lowest >= 53))):
        value[i] = float(sum(int(v) << (DIGIT * k) for k, v in enumerate(d[i])))   # rounded
    return np.ldexp(np.where(negative, -value, value), _ULP)
