"""The gradient pass, golden: ``dW[o, i] = sum_t dY[o, t] * X[i, t]`` for the mask's indices only.

In weight-streaming training the host streams the sparsity mask's indices (not values) and every
core adds the products of its tokens; the owner sends the totals out (``docs/host.md``). The
mesh's RTL does not run this pass yet, so the systems compute it here: exact products summed in
64 bits, never saturated, so that SwarmX's sums over systems are exact and a batch split over
any number of systems gives the same gradient. Totals beyond the 32-bit accumulator's range are
counted (a 32-bit gradient pass in RTL would saturate them).
"""

import numpy as np

from .numerics import check_operands

__all__ = ["gradient_reference"]


def gradient_reference(fmt, rows, cols, dY, X):
    """``(totals, beyond)``: for each index ``k``, ``sum_t dY[rows[k], t] * X[cols[k], t]``
    exactly (``int64``), and how many totals lie beyond ``fmt``'s accumulator range."""
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
