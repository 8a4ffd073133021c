"""A fast, bit-exact GEMM reference: what the mesh computes for a
:class:`~fabric.program.GemmProgram`, without wavelets, vectorised over outputs and tokens and
saturating (or, in bf16, rounding) in the same order as the mesh's rows and psum chains. The
wavelet-level model it stands for is :class:`fabric.mesh_model.MeshModel`."""

import numpy as np

from . import numerics
from .program import GemmProgram

__all__ = ["gemm_reference"]


def gemm_reference(config, program, X=None, *, fast=True):
    """``(Y, raw)``: what the mesh computes for ``program`` on ``X``, bit for bit, each
    ``[n_out, tokens]`` int64 (``Y`` requantised, ``raw`` the owner's 32-bit totals).

    Each row accumulates its weights of an output in stream order (``i`` ascending), saturating
    at every step; the psum chain then adds rows from the top down to the owner and from the
    bottom up to it, the owner adding its northern then its southern psum, each step saturated
    (``docs/pe.md``, "The partial-sum engine"). In bf16 the same order in binary32, without
    saturation (``docs/numerics.md``), always step by step. With ``fast``, outputs whose
    ``|W| @ |X|`` stays within the accumulator range (nothing can saturate) are an exact
    ``W @ X``; the others, or all with ``fast=False``, go through the step-by-step path. A
    masked program's products outside its mask are not made (its gates: ``docs/pe.md``), so
    those results are 0. A program's bias is its owner row's last AXPY (a weight on the ones
    slot: ``bias * one`` in every token); an ``act`` program's ``Y`` is the ReLU of the
    requantised totals, what its owners write into ``X`` and send out; a ``keep`` program's
    ``Y`` is 0 where ``keep`` is not set.
    """
    if not isinstance(program, GemmProgram):
        raise ValueError(f"program must be a GemmProgram, not {program!r}")
    if config != program.config:
        raise ValueError("program was compiled for another config")
    fmt = config.fmt
    X = program.check_x(X)
    W = program.W
    gate = program.mask
    if fmt.is_float:                    # every addition in its order: no shortcut
        raw = _float_totals(config, program.in_placement, W, X, program.out_placement.row_of,
                            gate, program.bias)
    else:
        bias = (np.zeros(program.n_out, dtype=np.int64) if program.bias is None
                else program.bias * numerics.one(fmt))
        raw = np.empty((program.n_out, program.tokens), dtype=np.int64)
        slow = np.arange(program.n_out)
        if fast:
            # integers below 2**53 are exact in float64 (|w x| <= 2**30, n_in < 2**17)
            Wf, Xf = W.astype(np.float64), X.astype(np.float64)
            safe = (np.abs(Wf) @ np.abs(Xf) + np.abs(bias)[:, None] <= fmt.acc_max).all(axis=1)
            raw[safe] = (Wf[safe] @ Xf).astype(np.int64) + bias[safe, None]
            if gate is not None:
                raw[safe] *= gate[safe]
            slow = np.flatnonzero(~safe)
        if slow.size:
            raw[slow] = _saturating(config, program.in_placement, W[slow], X,
                                    program.out_placement.row_of[slow],
                                    None if gate is None else gate[slow], bias[slow])
    Y, _ = numerics.requantise(fmt, raw)
    if program.act:
        Y = numerics.relu(fmt, Y)
    if program.keep is not None:
        Y = np.where(program.keep, Y, 0)
    return Y, raw


def _saturating(config, in_placement, W, X, owners, gate=None, bias=None):
    """The totals of outputs ``W`` (``[m, n_in]``) owned by rows ``owners``, step by step
    (``gate``: ``[m, tokens]``, the products made; ``bias``: ``[m]`` accumulator values the
    owner adds after its weights)."""
    fmt, R = config.fmt, config.rows
    lo, hi = fmt.acc_min, fmt.acc_max
    feats = [in_placement.features_of(r) for r in range(R)]
    K = max(len(f) for f in feats)
    index = np.zeros((R, K), dtype=np.int64)
    live = np.zeros((R, K), dtype=bool)
    for r, f in enumerate(feats):
        index[r, :len(f)] = f
        live[r, :len(f)] = True
    m, T = W.shape[0], X.shape[1]
    acc = np.zeros((R, m, T), dtype=np.int64)
    for k in range(K):
        w = np.where(live[:, k], W[:, index[:, k]], 0).T        # (R, m)
        x = np.where(live[:, k, None], X[index[:, k]], 0)       # (R, T)
        if gate is None:
            acc += w[:, :, None] * x[:, None, :]
        else:
            acc += w[:, :, None] * x[:, None, :] * gate[None]
        np.clip(acc, lo, hi, out=acc)
    o = np.arange(m)
    if bias is not None:
        acc[owners, o] = np.clip(acc[owners, o] + bias[:, None], lo, hi)
    down, up = acc.copy(), acc.copy()       # down[r]: what row r sends south; up[r]: north
    for r in range(1, R):
        down[r] = np.clip(acc[r] + down[r - 1], lo, hi)
    for r in range(R - 2, -1, -1):
        up[r] = np.clip(acc[r] + up[r + 1], lo, hi)
    o = np.arange(m)
    s = acc[owners, o]
    north = owners > 0
    s[north] = np.clip(s[north] + down[owners[north] - 1, o[north]], lo, hi)
    south = owners < R - 1
    s[south] = np.clip(s[south] + up[owners[south] + 1, o[south]], lo, hi)
    return s


def _float_totals(config, in_placement, W, X, owners, gate=None, bias=None):
    """:func:`_saturating` in bf16: the same additions in the same order, in numpy ``float32``
    (IEEE, nearest even), products of nonzero operands only; binary32 bit patterns (``bias``:
    bf16 operands)."""
    R = config.rows
    Wf = numerics.as_float32(W, operand=True)
    Xf = numerics.as_float32(X, operand=True)
    x_live = ~numerics.is_zero(config.fmt, X)
    w_live = ~numerics.is_zero(config.fmt, W)
    m, T = W.shape[0], X.shape[1]
    acc = np.zeros((R, m, T), dtype=np.float32)
    with np.errstate(all="ignore"):
        for r in range(R):
            for i in in_placement.features_of(r):      # stream order: i ascending
                live = w_live[:, i, None] & x_live[None, i]
                if gate is not None:
                    live &= gate
                acc[r] = np.where(live, acc[r] + Wf[:, i, None] * Xf[None, i], acc[r])
        o = np.arange(m)
        if bias is not None:        # the ones slot's AXPY where b != 0: b * 1.0 is b
            live = ~numerics.is_zero(config.fmt, bias)
            b = numerics.as_float32(bias, operand=True)
            acc[owners[live], o[live]] += b[live, None]
        down, up = acc.copy(), acc.copy()
        for r in range(1, R):
            down[r] = acc[r] + down[r - 1]
        for r in range(R - 2, -1, -1):
            up[r] = acc[r] + up[r + 1]
        o = np.arange(m)
        s = acc[owners, o]
        north = owners > 0
        s[north] = s[north] + down[owners[north] - 1, o[north]]
        south = owners < R - 1
        s[south] = s[south] + up[owners[south] + 1, o[south]]
    return numerics.from_float32(s)
