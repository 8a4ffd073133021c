"""The golden arithmetic: numpy twins of :mod:`rtl.numfmt`, bit for bit.

Pure functions over ``int64`` arrays (every fixed-point format here fits: products are at most
64 bits and are saturated before they could wrap). The RTL's number format object selects the
rules, so a second format plugs in beside :class:`~rtl.numfmt.FixedPoint` without touching the
callers.
"""

import numpy as np

from wse.rtl.numfmt import FixedPoint

__all__ = ["check_operands", "multiply", "accumulate", "requantise", "axpy"]


def _fixed(fmt):
    if not isinstance(fmt, FixedPoint):
        raise TypeError(f"No golden arithmetic for number format {fmt!r}")
    return fmt


def check_operands(fmt, values, what="operand"):
    """``values`` as ``int64``; ``ValueError`` naming ``what`` if any does not fit an operand."""
    fmt = _fixed(fmt)
    values = np.asarray(values, dtype=np.int64)
    bad = (values < fmt.operand_min) | (values > fmt.operand_max)
    if bad.any():
        raise ValueError(f"{what} must fit in int{fmt.width} "
                         f"({fmt.operand_min}..{fmt.operand_max}), not {int(values[bad].flat[0])}")
    return values


def multiply(fmt, a, b):
    """Exact products of operands."""
    _fixed(fmt)
    return np.asarray(a, dtype=np.int64) * np.asarray(b, dtype=np.int64)


def accumulate(fmt, acc, product):
    """``(sum, overflow)``: ``acc + product`` saturated to the accumulator range."""
    fmt = _fixed(fmt)
    total = np.asarray(acc, dtype=np.int64) + np.asarray(product, dtype=np.int64)
    overflow = (total > fmt.acc_max) | (total < fmt.acc_min)
    return np.clip(total, fmt.acc_min, fmt.acc_max), overflow


def requantise(fmt, acc):
    """``(operand, overflow)``: shift right by ``frac_bits`` rounding half to even, saturate."""
    fmt = _fixed(fmt)
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


def axpy(fmt, acc, weight, x):
    """One weight's AXPY over a row of activations, as the core does it.

    ``acc[t] += weight * x[t]`` for every ``t`` with ``weight != 0`` and ``x[t] != 0``, one
    saturating accumulation at a time. Returns ``(acc, overflow, issued, skipped_weight,
    skipped_act)``: the new accumulators, whether any accumulation saturated, and how many
    multiplies were issued or skipped for a zero weight or a zero activation.
    """
    acc = np.array(acc, dtype=np.int64)
    x = np.asarray(x, dtype=np.int64)
    if weight == 0:
        return acc, False, 0, x.size, 0
    live = x != 0
    acc[live], overflow = accumulate(fmt, acc[live], multiply(fmt, weight, x[live]))
    return acc, bool(overflow.any()), int(live.sum()), 0, int((~live).sum())
