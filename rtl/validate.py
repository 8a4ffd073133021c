"""The project's one set of argument checks: each returns the value it checked, normalised, or
raises ``ValueError`` with the message ``"<name> must be <what>, not <value!r>"``.

Every layer validates its parameters through these (``rtl`` is the bottom layer, so all may
import it); tests assert the messages.
"""

import math
import operator

import numpy as np

__all__ = ["count", "integer", "number", "pairs", "int_array", "index_text", "readonly"]


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


def integer(name, value, lo=None, hi=None):
    """``value`` as an ``int`` (not a ``bool``) in ``lo..hi`` (either bound may be ``None``)."""
    if lo is not None and hi is not None:
        kind = f"an integer in {lo}..{hi}"
    elif lo is not None:
        kind = f"an integer of at least {lo}"
    elif hi is not None:
        kind = f"an integer of at most {hi}"
    else:
        kind = "an integer"
    if isinstance(value, bool):
        raise ValueError(f"{name} must be {kind}, not {value!r}")
    try:
        value = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be {kind}, not {value!r}") from None
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise ValueError(f"{name} must be {kind}, not {value!r}")
    return value


def number(name, value, lo=None, hi=None, *, open_lo=False, open_hi=False):
    """``value`` as a finite ``float`` in ``lo..hi`` (``open_lo`` / ``open_hi`` exclude a
    bound; either may be ``None``)."""
    parts = []
    if lo is not None:
        parts.append(f"{'above' if open_lo else 'at least'} {lo}")
    if hi is not None:
        parts.append(f"{'below' if open_hi else 'at most'} {hi}")
    kind = "a finite number" + (" " + " and ".join(parts) if parts else "")
    if isinstance(value, bool):
        raise ValueError(f"{name} must be {kind}, not {value!r}")
    try:
        checked = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be {kind}, not {value!r}") from None
    if (not math.isfinite(checked)
            or (lo is not None and (checked <= lo if open_lo else checked < lo))
            or (hi is not None and (checked >= hi if open_hi else checked > hi))):
        raise ValueError(f"{name} must be {kind}, not {value!r}")
    return checked


def pairs(name, value, n_in, n_out):
    """``value``, a set of ``(input, output)`` index pairs below ``(n_in, n_out)``, as a set;
    ``None`` means every pair."""
    every = {(i, o) for i in range(n_in) for o in range(n_out)}
    if value is None:
        return every
    value = set(value)
    if not value <= every:
        raise ValueError(f"{name} must be (input, output) index pairs below ({n_in}, {n_out}), "
                         f"not {sorted(value - every)}")
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
