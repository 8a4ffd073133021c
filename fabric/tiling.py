"""GEMMs bigger than the mesh: ``Y = W @ X`` cut into blocks that fit, and put back together.

The mesh holds activations only (``docs/mesh.md``), so a layer of any size runs on it block by
block (``docs/host.md``, "Capacity"):

- tokens in blocks of ``cols * n_tok`` (a token's result never depends on another token);
- if every input feature fits (``n_in <= rows * n_feat``), outputs in blocks of
  ``rows * n_out``, each block requantised on the mesh as usual;
- otherwise input features in blocks of ``rows * n_feat``, every output at once, each block's
  32-bit totals sent out raw (``CR_OUT``); the host adds a row of blocks in ``int64``, saturates
  the sum to the accumulator range and requantises it (:func:`combine`).

:func:`run_tiled` drives any per-block runner (a System's ``gemm``, or the golden model), so the
RTL and the golden model see the same blocks.
"""

from dataclasses import dataclass, field

import numpy as np

from . import numerics
from .config import MeshConfig

__all__ = ["TilePlan", "plan_tiles", "combine", "run_tiled", "TiledResult"]


def _chunks(n, size):
    return [slice(a, min(a + size, n)) for a in range(0, n, size)]


@dataclass(frozen=True)
class TilePlan:
    """How ``(n_out, n_in) @ (n_in, tokens)`` is cut for a mesh: ``raw`` when the input features
    are split, and the output, input and token slices."""
    raw: bool
    outputs: list
    inputs: list
    tokens: list

    @property
    def blocks(self):
        return len(self.outputs) * len(self.inputs) * len(self.tokens)


def plan_tiles(config, n_out, n_in, tokens):
    """The :class:`TilePlan` of a GEMM on the mesh of ``config``."""
    if not isinstance(config, MeshConfig):
        raise ValueError(f"config must be a MeshConfig, not {config!r}")
    for name, value in (("n_out", n_out), ("n_in", n_in), ("tokens", tokens)):
        if not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be a positive integer, not {value!r}")
    R = config.rows
    raw = n_in > R * config.n_feat
    outputs = [slice(0, n_out)] if raw else _chunks(n_out, R * config.n_out)
    return TilePlan(raw, outputs, _chunks(n_in, R * config.n_feat),
                    _chunks(tokens, config.max_tokens))


def combine(fmt, partials):
    """Raw block totals (``int64`` arrays) -> ``(Y, overflow)``: their sum saturated to the
    accumulator range, then requantised."""
    total = np.sum(partials, axis=0, dtype=np.int64)
    sat = np.clip(total, fmt.acc_min, fmt.acc_max)
    Y, overflow = numerics.requantise(fmt, sat)
    return Y, bool(overflow.any() or (sat != total).any())


@dataclass
class TiledResult:
    """``y`` (``int64 [n_out, tokens]``, requantised), the compute cycles of every block added
    (``None`` if the runner gave none), and the per-block results."""
    y: np.ndarray
    cycles: int | None
    overflow: bool
    results: list = field(default_factory=list)


def run_tiled(config, W, X, gemm):
    """``W @ X`` through ``gemm(W_block, X_block, raw) -> GemmResult`` block by block."""
    W, X = np.asarray(W, dtype=np.int64), np.asarray(X, dtype=np.int64)
    n_out, n_in = W.shape
    if X.ndim != 2 or X.shape[0] != n_in:
        raise ValueError(f"X must have n_in = {n_in} rows (W is {n_out}x{n_in}), not shape "
                         f"{X.shape}")
    plan = plan_tiles(config, n_out, n_in, X.shape[1])
    Y = np.zeros((n_out, X.shape[1]), dtype=np.int64)
    results, cycles, overflow = [], 0, False
    for ts in plan.tokens:
        for os_ in plan.outputs:
            partials = []
            for is_ in plan.inputs:
                r = gemm(W[os_, is_], X[is_, ts], plan.raw)
                results.append(r)
                cycles = None if cycles is None or r.cycles is None else cycles + r.cycles
                overflow |= bool(r.overflow)
                partials.append(np.asarray(r.y, dtype=np.int64))
            if plan.raw:
                Y[os_, ts], ovf = combine(config.fmt, partials)
                overflow |= ovf
            else:
                Y[os_, ts] = partials[0]
    return TiledResult(Y, cycles, overflow, results)
