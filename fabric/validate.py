"""Argument checks the fabric's Python shares: each raises ``ValueError`` naming the problem."""

import operator

import numpy as np

__all__ = ["count", "int_array", "index_text", "readonly"]


def count(name, value, minimum=1):
    """``value`` as an ``int`` of at least ``minimum``."""
    kind = "positive" if minimum == 1 else f"at least {minimum}" if minimum else "non-negative"
    try:
        value = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be a {kind} integer, not {value!r}") from None
    if value < minimum:
        raise ValueError(f"{name} must be a {kind} integer, not {value!r}")
    return value


def int_array(values, what, ndim):
    """``values`` as an ``int64`` array of ``ndim`` dimensions; ``ValueError`` for anything that
    is not integers (floats are accepted when they are whole numbers)."""
    a = np.asarray(values)
    if a.ndim != ndim:
        raise ValueError(f"{what} must be a {ndim}-D array, not one of shape {a.shape}")
    if a.dtype.kind == "b":
        return a.astype(np.int64)
    if a.dtype.kind == "f":
        bad = ~np.isfinite(a) | (a != np.round(a))
        if bad.any():
            raise ValueError(f"{what} must hold integers, not {a[bad].flat[0].item()!r} "
                             f"(at {index_text(np.argwhere(bad)[0])})")
        if a.size and np.abs(a).max() >= 2.0 ** 62:
            raise ValueError(f"{what} holds {a.flat[np.abs(a).argmax()].item()!r}, far too large")
        return a.astype(np.int64)
    if a.dtype.kind not in "iu":
        raise ValueError(f"{what} must hold integers, not {a.dtype} values")
    if a.dtype.kind == "u" and a.size and a.max() > np.iinfo(np.int64).max:
        raise ValueError(f"{what} holds {int(a.max())}, far too large")
    return a.astype(np.int64)


def index_text(index):
    """``[2, 5]`` for an array index, for messages."""
    return "[" + ", ".join(str(int(i)) for i in index) + "]"


def readonly(a):
    """``a``, made read-only."""
    a.setflags(write=False)
    return a
