"""The weight-gradient pass: ``dW[o, i] = sum_t dY[o, t] * X[i, t]`` for the mask's indices only.

On the mesh it is the masked GEMM ``dY @ X^T`` (``docs/mesh.md``, "Masked GEMMs"):
:func:`gradient_gemm` streams the nonzero deltas as the weights (a zero delta costs nothing),
loads ``X^T`` (the layer's input activations, tokens as the features, the layer's input features
as the mesh's tokens; a zero activation costs no cycle), gates each output's tokens with the
layer's mask (a pair outside the mask costs no cycle either) and sends the 32-bit totals out raw.
A layer with fewer outputs than inputs runs *transposed*, ``dW^T = X @ dY^T`` under the mask's
transpose: the activations stream as the weights and ``dY^T`` is loaded, the smaller of the two
operands (the 10 deltas of a batch's logits rather than the 64 or 512 activations); the totals
are the same sums.
The host adds the totals of blocks exactly in ``int64``; a block whose 32-bit accumulation
saturated sets the pass's overflow flag, which the trainer counts and reports
(``docs/host.md``, "Numerics of the gradient").

In bf16 the deltas and activations are bf16 bit patterns and the totals binary32 bit patterns:
each a sum of exact products rounded to binary32 addition by addition on the mesh
(``docs/numerics.md``), the blocks' totals added in binary32 in block order
(:func:`~fabric.tiling.run_tiled`); the overflow flag marks a total that became ``±inf`` or
NaN. Such a sum depends on which tokens it adds, so on how a batch is split
(``docs/host.md``, "bf16").

:func:`gradient_reference` is the exact numpy sum (fixed point), the reference the tests compare
with.
"""

import numpy as np

from .numerics import check_operands
from .tiling import SparseRows

__all__ = ["gradient_gemm", "gradient_macs", "gradient_mask", "gradient_reference"]


def gradient_mask(shape, rows, cols):
    """The ``(n_out, n_in)`` bool mask of the indices ``rows``, ``cols``, or ``None`` when they
    cover every pair (a dense layer: no MASK needed)."""
    n_out, n_in = shape
    rows, cols = np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)
    if rows.shape != cols.shape or rows.ndim != 1:
        raise ValueError(f"rows and cols must be index vectors of one length, not shapes "
                         f"{rows.shape} and {cols.shape}")
    if rows.size and (rows.min() < 0 or rows.max() >= n_out or cols.min() < 0
                      or cols.max() >= n_in):
        raise ValueError(f"mask indices must lie in the {n_out}x{n_in} layer")
    mask = np.zeros((n_out, n_in), dtype=bool)
    mask[rows, cols] = True
    return None if mask.all() else mask


def gradient_gemm(gemm, shape, rows, cols, dY, X, *, transposed=None):
    """The gradient at the indices ``rows``, ``cols`` of an ``shape = (n_out, n_in)`` layer, as
    ``gemm(W, X, mask=, totals=True) -> (totals, *figures)`` computes it (a
    :class:`~host.worker.MeshWorker`'s tiled GEMM on its System); returns ``(dW, *figures)``
    with ``dW`` the ``int64`` totals at the indices (bf16: binary32 bit patterns; a zero delta
    must be ``+0``, as a ``-0`` would stream as a weight). ``transposed``: stream ``X`` and load
    ``dY^T`` (``True``), or stream ``dY`` and load ``X^T`` (``False``); by default transposed
    when the layer has fewer outputs than inputs, so that the smaller operand is loaded. In
    fixed point both give the same totals; in bf16 the two add a pair's products in different
    orders (which row holds which token), so their roundings can differ.

    ``ValueError`` when ``dY`` (``[n_out, T]``) and ``X`` (``[n_in, T]``) do not match the layer
    or each other."""
    n_out, n_in = shape
    dY, X = np.asarray(dY, dtype=np.int64), np.asarray(X, dtype=np.int64)
    if dY.ndim != 2 or X.ndim != 2 or dY.shape[0] != n_out or X.shape[0] != n_in \
            or dY.shape[1] != X.shape[1]:
        raise ValueError(f"the gradient of a {n_out}x{n_in} layer needs dY [{n_out}, T] and X "
                         f"[{n_in}, T], not {dY.shape} and {X.shape}")
    mask = gradient_mask(shape, rows, cols)
    rows, cols = np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)
    if transposed is None:
        transposed = n_out < n_in
    if transposed:
        G, *figures = gemm(SparseRows.from_dense(X), dY.T, mask=None if mask is None else mask.T,
                           totals=True)
        return G[cols, rows], *figures
    G, *figures = gemm(SparseRows.from_dense(dY), X.T, mask=mask, totals=True)
    return G[rows, cols], *figures


def gradient_macs(shape, rows, cols, dY, X):
    """``(useful, dense)``: the products of a nonzero delta and a nonzero activation that the
    gradient at the indices ``rows``, ``cols`` needs, and that the gradient of every pair of
    the ``shape`` layer needs (a dense layer's)."""
    both = (np.asarray(dY) != 0).astype(np.int64) @ (np.asarray(X) != 0).T.astype(np.int64)
    if both.shape != tuple(shape):
        raise ValueError(f"dY and X give a {both.shape[0]}x{both.shape[1]} gradient, not the "
                         f"{shape[0]}x{shape[1]} layer's")
    return int(both[np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)].sum()), \
        int(both.sum())


def gradient_reference(fmt, rows, cols, dY, X):
    """``(totals, beyond)``: for each index ``k``, ``sum_t dY[rows[k], t] * X[cols[k], t]``
    exactly (``int64``), and how many totals lie beyond ``fmt``'s accumulator range. Fixed point
    only: a bf16 gradient is rounded as the mesh adds (``ValueError``)."""
    if fmt.is_float:
        raise ValueError("gradient_reference is the fixed-point gradient; a bf16 gradient is "
                         "the mesh's binary32 sum (fabric.reference.gemm_reference)")
    dY = check_operands(fmt, dY, "dY")
    X = check_operands(fmt, X, "X")
    if dY.ndim != 2 or X.ndim != 2 or dY.shape[1] != X.shape[1]:
        raise ValueError(f"dY and X must be matrices with the same tokens, not {dY.shape} and "
                         f"{X.shape}")
    rows, cols = np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)
    totals = np.empty(rows.size, dtype=np.int64)
    step = max(1, (1 << 22) // max(1, X.shape[1]))
    for a in range(0, rows.size, step):
        r, c = rows[a:a + step], cols[a:a + step]
        totals[a:a + step] = np.einsum("kt,kt->k", dY[r], X[c])
    beyond = (totals < fmt.acc_min) | (totals > fmt.acc_max)
    return totals, int(np.count_nonzero(beyond))
