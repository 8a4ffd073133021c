"""Partial sums only where an output needs them (``docs/mesh.md``, "Partial sums").

A row's partial-sum engine spends ``n_tok`` cycles on every output it reduces. At high sparsity
most rows hold no weight of an output; they take no part in its reduction when its owner lies
inside the span of the rows that do (:meth:`~fabric.placement.Placement.spanning`). This module
says, for a :class:`~fabric.program.GemmProgram`, which rows stream a weight of each output
(:func:`weight_rows`), which rows take part and which neighbours' psums each takes
(:func:`cr_flags`), and in which order the outputs go (:func:`stream_order`).
"""

import numpy as np

__all__ = ["cr_flags", "has_weights", "stream_order", "weight_rows"]


def has_weights(rows, n_out, weights, in_row, *, zeros=False, streamed=None):
    """``(n_out, rows)`` bool: whether row ``r`` streams a weight of output ``o``, for the
    nonzero ``weights`` (:class:`~fabric.tiling.SparseRows`) whose input features lie in rows
    ``in_row``; with ``zeros`` every row that holds a feature streams every output's (zero)
    weights; ``streamed`` (per output) leaves out the outputs a mask gates off everywhere."""
    has = np.zeros((n_out, rows), dtype=bool)
    if zeros:
        has[:, np.unique(in_row)] = True
    else:
        has[weights.rows, in_row[weights.indices]] = True
    if streamed is not None:
        has &= np.asarray(streamed, dtype=bool)[:, None]
    return has


def weight_rows(program, *, unmasked=False):
    """:func:`has_weights` of ``program`` (``unmasked``: as if it had no mask)."""
    streamed = None if program.mask is None or unmasked else program.streamed_outputs
    return has_weights(program.config.rows, program.n_out, program.weights,
                       program.in_placement.row_of, zeros=program.zeros, streamed=streamed)


def cr_flags(program, *, unmasked=False):
    """``(skip, quiet_n, quiet_s)``, each ``(n_out, rows)`` bool: a row runs its partial-sum
    engine for an output when it owns it or when a row at or beyond it, on its side of the
    owner, holds a weight of it; every other row skips it (it has no weight of the output, so
    its accumulators are zero, and it gets no CR for it); a row takes no psum from a neighbour
    that skips (``quiet_n``, ``quiet_s``). All False without ``program.spans``: every row
    reduces every output. An output a mask gates off on every token gets no CR in any row (its
    results are 0, and the host knows it). ``unmasked``: the flags of the same program without
    its mask."""
    rows = program.config.rows
    off = np.zeros((program.n_out, rows), dtype=bool)
    if not program.spans:
        skip = off.copy()
        if program.mask is not None and not unmasked:
            skip[~program.streamed_outputs] = True
        return skip, off, off.copy()
    has = weight_rows(program, unmasked=unmasked)
    owner = program.out_placement.row_of[:, None]
    r = np.arange(rows)[None, :]
    from_top = np.logical_or.accumulate(has, axis=1)
    from_bottom = np.logical_or.accumulate(has[:, ::-1], axis=1)[:, ::-1]
    runs = (r == owner) | ((r < owner) & from_top) | ((r > owner) & from_bottom)
    if program.mask is not None and not unmasked:
        runs &= program.streamed_outputs[:, None]
    above = np.pad(runs[:, :-1], ((0, 0), (1, 0)))        # runs[o, r - 1], False at row 0
    below = np.pad(runs[:, 1:], ((0, 0), (0, 1)))         # runs[o, r + 1]
    quiet_n = (r > 0) & (r <= owner) & ~above
    quiet_s = (r < rows - 1) & (r >= owner) & ~below
    return ~runs, quiet_n, quiet_s


def stream_order(program, owners=None):
    """The outputs in stream order: grouped by owner row (``owners``: the rows in the order
    their groups go, ``0 .. rows-1`` by default), by index within a row, so that psums flow one
    way for a run of outputs. With ``program.spans`` only the outputs whose weights lie in two
    rows or more go so; the others (one row's weights, or none: no psum crosses a link, only
    the owner's engine runs) are dealt evenly among them, round-robin over their owners, so
    that no row meets a run of its own while the others wait on it."""
    owner = program.out_placement.row_of
    rank = np.arange(program.config.rows)
    if owners is not None:
        rank[np.asarray(owners, dtype=np.int64)] = np.arange(rank.size)
    grouped = np.argsort(rank[owner], kind="stable")
    if not program.spans:
        return grouped
    alone = weight_rows(program).sum(axis=1) <= 1
    chained = grouped[~alone[grouped]]
    single = np.flatnonzero(alone)
    single = single[np.lexsort((owner[single], program.out_placement.slot_of[single]))]
    # each one's place in [0, 1): a single goes before a chained one at the same place
    at = np.concatenate([(np.arange(single.size) + 0.5) / max(1, single.size),
                         (np.arange(chained.size) + 0.5) / max(1, chained.size)])
    return np.concatenate([single, chained])[np.argsort(at, kind="stable")]
