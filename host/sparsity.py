"""Sparsity induction for MemoryX: which weights of a layer exist (its *mask*).

- :func:`magnitude_mask` keeps the largest ``|W|`` (ties broken by position, so a mask never
  depends on anything but ``W``);
- :func:`random_mask` draws an unstructured mask from a seeded generator;
- :class:`SparsitySchedule` says, step by step, what sparsity a layer should have (the gradual
  cubic ramp of Zhu & Gupta, 2017, ``s(t) = s_f + (s_i - s_f) (1 - (t - t0) / (t1 - t0))**3``,
  pruning every ``every`` steps) and when to re-select a share of the mask (dynamic sparsity in
  the manner of SET, Mocanu et al. 2018: drop the weakest live weights, regrow as many at random
  positions, starting from zero).

Masks only ever shrink between the ramp's pruning steps (a pruned weight is zero and stays out),
and re-selection keeps the count; MemoryX applies updates only inside the mask.
"""

import math

import numpy as np

from wse.rtl.validate import integer, number

__all__ = ["magnitude_mask", "random_mask", "reselect", "SparsitySchedule", "KINDS"]

#: How a schedule picks its mask: by magnitude (gradual pruning), at random once (a fixed
#: random mask), or by magnitude with periodic re-selection.
KINDS = ("gradual", "random", "dynamic")


def _sparsity(value, name="sparsity"):
    return number(name, value, 0.0, 1.0, open_hi=True)


def _keep(n, sparsity):
    """How many of ``n`` weights survive ``sparsity`` (at least one)."""
    return max(1, n - int(math.floor(sparsity * n + 1e-9)))


def magnitude_mask(W, sparsity, within=None):
    """The mask keeping the ``(1 - sparsity)`` largest ``|W|`` (among ``within``, if given)."""
    sparsity = _sparsity(sparsity)
    W = np.asarray(W)
    flat = np.abs(W).ravel().astype(np.float64)
    candidates = np.arange(flat.size) if within is None else np.flatnonzero(np.ravel(within))
    keep = min(candidates.size, _keep(flat.size, sparsity))
    order = candidates[np.argsort(-flat[candidates], kind="stable")]
    mask = np.zeros(flat.size, dtype=bool)
    mask[order[:keep]] = True
    return mask.reshape(W.shape)


def random_mask(shape, sparsity, rng):
    """An unstructured mask of ``shape`` with exactly the kept count of ``sparsity``, drawn from
    ``rng`` (a ``numpy.random.Generator``)."""
    sparsity = _sparsity(sparsity)
    n = int(np.prod(shape))
    mask = np.zeros(n, dtype=bool)
    mask[rng.permutation(n)[:_keep(n, sparsity)]] = True
    return mask.reshape(shape)


def reselect(W, mask, fraction, rng):
    """Dynamic re-selection: ``(new_mask, grown)``. Drops the ``fraction`` of live weights with
    the smallest ``|W|`` and regrows as many at random among the dead (``grown``: their mask);
    the count stays the same."""
    mask = np.asarray(mask, dtype=bool)
    live = np.flatnonzero(mask.ravel())
    dead = np.flatnonzero(~mask.ravel())
    n = min(int(round(fraction * live.size)), dead.size)
    new = mask.ravel().copy()
    grown = np.zeros_like(new)
    if n:
        weakest = live[np.argsort(np.abs(np.ravel(W)[live]), kind="stable")[:n]]
        born = rng.choice(dead, size=n, replace=False)
        new[weakest] = False
        new[born] = True
        grown[born] = True
    return new.reshape(mask.shape), grown.reshape(mask.shape)


class SparsitySchedule:
    """The sparsity of one layer over training.

    Parameters
    ----------
    final : float in [0, 1), the sparsity reached at ``end``.
    kind : ``"gradual"`` (magnitude pruning on the cubic ramp), ``"random"`` (a fixed random
        mask at ``final`` from step 0) or ``"dynamic"`` (the ramp, then re-selection).
    initial : float, the ramp's starting sparsity (``gradual`` and ``dynamic``).
    start, end : steps where the ramp begins and reaches ``final`` (``end >= start``).
    every : prune every this many steps on the ramp.
    reselect_every, reselect_fraction : after ``end``, re-select this share of the mask every
        this many steps (``dynamic`` only).
    """

    def __init__(self, final, *, kind="gradual", initial=0.0, start=0, end=0, every=1,
                 reselect_every=10, reselect_fraction=0.2):
        self.final = _sparsity(final, "final sparsity")
        self.initial = _sparsity(initial, "initial sparsity")
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
        self.kind = kind
        start, end = integer("start", start, 0), integer("end", end, 0)
        if end < start:
            raise ValueError(f"end ({end}) must not come before start ({start})")
        self.start, self.end, self.every = start, end, integer("every", every, 1)
        self.reselect_every = integer("reselect_every", reselect_every, 1)
        self.reselect_fraction = _sparsity(reselect_fraction, "reselect_fraction")

    def to_dict(self):
        return dict(vars(self))

    @classmethod
    def from_dict(cls, d):
        d = dict(d)
        return cls(d.pop("final"), **d)

    def target(self, step):
        """The sparsity the schedule asks for at ``step``."""
        if self.kind == "random" or step >= self.end:
            return self.final
        if step < self.start:
            return self.initial
        left = 1 - (step - self.start) / (self.end - self.start)
        return self.final + (self.initial - self.final) * left ** 3

    def prunes_at(self, step):
        """Whether the mask is re-pruned to :meth:`target` at ``step``."""
        if self.kind == "random":
            return False
        return step == self.end or (self.start <= step < self.end
                                    and (step - self.start) % self.every == 0)

    def reselects_at(self, step):
        """Whether the mask is re-selected at ``step``."""
        return (self.kind == "dynamic" and step > self.end
                and (step - self.end) % self.reselect_every == 0)
