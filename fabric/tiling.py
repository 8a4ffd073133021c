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
RTL and the golden model see the same blocks. ``W`` is a dense matrix or, as the host streams it,
its compressed rows (:class:`SparseRows`); a block of compressed rows is cut from them directly,
never through a dense matrix.
"""

from dataclasses import dataclass, field

import numpy as np

from wse.rtl.validate import count, int_array

from . import numerics
from .config import MeshConfig

__all__ = ["SparseRows", "TilePlan", "plan_tiles", "combine", "run_tiled", "TiledResult"]


def _chunks(n, size):
    return [slice(a, min(a + size, n)) for a in range(0, n, size)]


@dataclass(frozen=True)
class SparseRows:
    """A matrix by compressed rows (CSR): row ``o``'s entries are the columns
    ``indices[indptr[o]:indptr[o + 1]]`` (ascending) and their ``values``; every other entry is
    zero. Build one with :meth:`from_dense` or :meth:`checked`; :meth:`block` and
    :meth:`transpose` work on the rows without a dense matrix.

    Members
    -------
    shape : (rows, cols)
    indptr : (rows + 1,) int64
    indices, values : (entries,) int64
    """
    shape: tuple
    indptr: np.ndarray
    indices: np.ndarray
    values: np.ndarray

    @classmethod
    def checked(cls, shape, indptr, indices, values):
        """Compressed rows from arrays of anything integer; ``ValueError`` naming what is
        malformed (a bad ``indptr``, a column outside the shape or out of order in its row)."""
        n_rows, n_cols = (count("shape[0]", shape[0]), count("shape[1]", shape[1]))
        indptr = int_array(indptr, "indptr", 1)
        indices = int_array(indices, "indices", 1)
        values = int_array(values, "values", 1)
        if indptr.size != n_rows + 1 or indptr[0] != 0 or (np.diff(indptr) < 0).any():
            raise ValueError(f"indptr must be {n_rows + 1} non-decreasing offsets from 0, not "
                             f"{indptr.size} offsets from {indptr[:1].tolist()}")
        if indices.size != indptr[-1] or values.size != indices.size:
            raise ValueError(f"indices and values must hold indptr[-1] = {int(indptr[-1])} "
                             f"entries, not {indices.size} and {values.size}")
        if indices.size and (indices.min() < 0 or indices.max() >= n_cols):
            raise ValueError(f"indices must be columns in 0..{n_cols - 1}, not "
                             f"{int(indices[(indices < 0) | (indices >= n_cols)][0])}")
        rows = np.repeat(np.arange(n_rows), np.diff(indptr))
        if (np.diff(rows * n_cols + indices) <= 0).any():
            raise ValueError("indices must be ascending within each row")
        return cls((n_rows, n_cols), indptr, indices, values)

    @classmethod
    def from_dense(cls, W):
        """The nonzero entries of the matrix ``W``."""
        W = np.asarray(W, dtype=np.int64)
        rows, cols = np.nonzero(W)
        return cls(W.shape, _offsets(rows, W.shape[0]), cols.astype(np.int64), W[rows, cols])

    @property
    def rows(self):
        """The row of every entry."""
        return np.repeat(np.arange(self.shape[0]), np.diff(self.indptr))

    def nonzero(self):
        """These rows without their explicit zeros."""
        keep = self.values != 0
        if keep.all():
            return self
        return SparseRows(self.shape, _offsets(self.rows[keep], self.shape[0]),
                          self.indices[keep], self.values[keep])

    def transpose(self):
        """The compressed rows of the transpose (columns ascending within each of its rows)."""
        order = np.argsort(self.indices, kind="stable")        # rows stay ascending
        return SparseRows((self.shape[1], self.shape[0]),
                          _offsets(self.indices[order], self.shape[1]), self.rows[order],
                          self.values[order])

    def block(self, rows, cols):
        """The block ``[rows, cols]`` (two slices of step 1), as compressed rows."""
        n_rows, n_cols = self.shape
        r0, r1, _ = rows.indices(n_rows)
        c0, c1, _ = cols.indices(n_cols)
        if (r0, r1, c0, c1) == (0, n_rows, 0, n_cols):
            return self
        a, b = int(self.indptr[r0]), int(self.indptr[r1])
        local = np.repeat(np.arange(r1 - r0), np.diff(self.indptr[r0:r1 + 1]))
        indices, values = self.indices[a:b], self.values[a:b]
        keep = (indices >= c0) & (indices < c1)
        return SparseRows((r1 - r0, c1 - c0), _offsets(local[keep], r1 - r0),
                          indices[keep] - c0, values[keep])

    def dense(self):
        """The matrix, ``int64``."""
        W = np.zeros(self.shape, dtype=np.int64)
        W[self.rows, self.indices] = self.values
        return W


def _offsets(rows, n):
    """``indptr`` of entries in row order whose rows are ``rows``."""
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    return indptr


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


def plan_tiles(config, n_out, n_in, tokens, *, raw=False):
    """The :class:`TilePlan` of a GEMM on the mesh of ``config`` (``raw``: every block sends
    its totals out raw, whether or not the input features are split)."""
    if not isinstance(config, MeshConfig):
        raise ValueError(f"config must be a MeshConfig, not {config!r}")
    n_out, n_in, tokens = count("n_out", n_out), count("n_in", n_in), count("tokens", tokens)
    R = config.rows
    raw = bool(raw) or n_in > R * config.n_feat
    outputs = [slice(0, n_out)] if raw else _chunks(n_out, R * config.n_out)
    return TilePlan(raw, outputs, _chunks(n_in, R * config.n_feat),
                    _chunks(tokens, config.max_tokens))


def combine(fmt, partials):
    """Raw block totals (``int64`` arrays) -> ``(Y, overflow)``: their sum saturated to the
    accumulator range, then requantised (bf16: added in binary32 in block order, the first
    block first, then rounded to bf16; ``docs/numerics.md``)."""
    if fmt.is_float:
        total = partials[0]
        overflow = False
        for block in partials[1:]:
            total, ovf = numerics.accumulate(fmt, total, block)
            overflow |= bool(ovf.any())
        Y, ovf = numerics.requantise(fmt, total)
        return Y, overflow or bool(ovf.any())
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


def run_tiled(config, W, X, gemm, *, mask=None, totals=False):
    """``W @ X`` through ``gemm(W_block, X_block, raw) -> GemmResult`` block by block; ``W`` is
    a dense matrix or :class:`SparseRows`, and its blocks are of the same kind.

    ``mask`` (``(n_out, tokens)`` bools): a masked GEMM, each block's slice of it given to
    ``gemm`` as ``mask=``. ``totals``: every block raw, and ``y`` the exact ``int64`` sums of
    the blocks' 32-bit totals, neither saturated again nor requantised (the weight-gradient
    pass: SwarmX adds them up exactly; a block that saturated sets ``overflow``); in bf16 the
    binary32 totals added in block order."""
    sparse = isinstance(W, SparseRows)
    W = W if sparse else np.asarray(W, dtype=np.int64)
    X = np.asarray(X, dtype=np.int64)
    n_out, n_in = W.shape
    if X.ndim != 2 or X.shape[0] != n_in:
        raise ValueError(f"X must have n_in = {n_in} rows (W is {n_out}x{n_in}), not shape "
                         f"{X.shape}")
    if mask is not None:
        mask = np.asarray(mask)
        if mask.shape != (n_out, X.shape[1]):
            raise ValueError(f"mask must have shape (n_out, tokens) = ({n_out}, {X.shape[1]}), "
                             f"not {mask.shape}")
    plan = plan_tiles(config, n_out, n_in, X.shape[1], raw=totals)
    Y = np.zeros((n_out, X.shape[1]), dtype=np.int64)
    results, cycles, overflow = [], 0, False
    for ts in plan.tokens:
        for os_ in plan.outputs:
            partials = []
            for is_ in plan.inputs:
                extra = {} if mask is None else {"mask": mask[os_, ts]}
                r = gemm(W.block(os_, is_) if sparse else W[os_, is_], X[is_, ts], plan.raw,
                         **extra)
                results.append(r)
                cycles = None if cycles is None or r.cycles is None else cycles + r.cycles
                overflow |= bool(r.overflow)
                partials.append(np.asarray(r.y, dtype=np.int64))
            if totals and config.fmt.is_float:
                total = partials[0]
                for block in partials[1:]:
                    total, ovf = numerics.accumulate(config.fmt, total, block)
                    overflow |= bool(ovf.any())
                Y[os_, ts] = total
            elif totals:
                Y[os_, ts] = np.sum(partials, axis=0, dtype=np.int64)
            elif plan.raw:
                Y[os_, ts], ovf = combine(config.fmt, partials)
                overflow |= ovf
            else:
                Y[os_, ts] = partials[0]
    return TiledResult(Y, cycles, overflow, results)
