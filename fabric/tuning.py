"""Choosing among the programs of one GEMM by the cycle model (``docs/mesh.md``, "Tuning").

A GEMM compiles to many programs that compute the same results and differ only in cycles: where
the input features go, whether each row reduces only the outputs it holds weights of
(``spans``) and the order the outputs stream in. :func:`compile_gemm`'s defaults are rules of
thumb; :func:`tune_gemm` compiles the program of every combination of a few of these choices
that the caller left open, runs the cycle model (:mod:`.cycle_model`) on each and returns the
fastest. The defaults are among them, so a tuned program is never modelled slower than the
default one.

The orders tried (each a permutation :func:`~.compiler.compile_gemm` takes as ``order``):

- :func:`~.spans.stream_order`, the default: outputs grouped by owner row, top row first;
- the same with the owner groups from the outer rows in (:func:`middle_last`), so that the
  last outputs, whose reductions nothing overlaps, have the shortest psum chains;
- :func:`balanced_order` over all outputs, and over the same owner groups: each next output
  the one that keeps the rows' dispatchers closest together, so that no row runs so far ahead
  of a reduction's slowest row that it waits for a free accumulator buffer.
"""

import numpy as np

from .compiler import compile_gemm
from .cycle_model import CycleModel
from .placement import Placement
from .spans import stream_order

__all__ = ["tune_gemm", "middle_last", "balanced_order"]


def tune_gemm(config, W, X=None, **options):
    """The program of ``W @ X`` with the fewest modelled cycles among those :func:`compile_gemm`
    gives for the choices ``options`` (its keyword arguments) leave open: without
    ``in_placement`` (and with ``balance``), the balanced and the packed placement
    (:meth:`Placement.packed_counts`; not for a resident ``X``, ``load=False``); without
    ``spans``, with and without; without ``order``,
    the orders of the module's docstring. The default program wins every tie. The program
    keeps a ``tuned`` attribute: ``{"candidates": programs modelled, "cycles": its modelled
    cycles, "default_cycles": the default program's}``. ``ValueError`` as
    :func:`compile_gemm`, and without ``X``."""
    if X is None:
        raise ValueError("tune_gemm needs X: the cycle model costs each program on its "
                         "activations")
    default = compile_gemm(config, W, X, **options)
    X = default.X
    placements = [default.in_placement]
    # a resident X (load=False) is where an earlier program put it: its placement stays
    if (options.get("in_placement") is None and options.get("balance", True)
            and options.get("load", True)):
        counts = np.bincount(default.weights.indices, minlength=default.n_in)
        packed = Placement.packed_counts(counts, config.rows)
        if packed != default.in_placement:
            placements.append(packed)
    spans = [default.spans]
    if options.get("spans") is None:
        spans.append(not default.spans)
    models = []

    def offer(program):
        models.append((CycleModel(program, X).cycles, len(models), program))
        return models[-1]

    offer(default)
    for placement in placements:
        for span in spans:
            if placement is default.in_placement and span == default.spans:
                base = default
            else:
                base = offer(compile_gemm(config, W, X, **(options | {
                    "in_placement": placement, "spans": span})))[2]
            if options.get("order") is not None:
                continue
            costs = CycleModel(base, X).costs
            for order in _orders(base, costs):
                offer(compile_gemm(config, W, X, **(options | {
                    "in_placement": base.in_placement, "out_placement": base.out_placement,
                    "spans": span, "order": order})))
    cycles, _, best = min(models, key=lambda m: m[:2])
    best.tuned = {"candidates": len(models), "cycles": int(cycles),
                  "default_cycles": int(models[0][0])}
    return best


def _orders(program, costs):
    """The orders to try beside ``program``'s own (``costs``: the cycle model's, by output)."""
    rows = program.config.rows
    outer = middle_last(rows)
    owner = program.out_placement.row_of
    groups = [np.flatnonzero(owner == r) for r in outer]
    candidates = [stream_order(program, owners=outer),
                  balanced_order(costs, [np.arange(program.n_out)]),
                  balanced_order(costs, groups)]
    seen, unique = [program.output_order], []
    for order in candidates:
        if not any(np.array_equal(order, s) for s in seen):
            seen.append(order)
            unique.append(order)
    return unique


def middle_last(rows):
    """The rows from the outside in: farthest from the middle first, the upper of two equally
    far first (``0, 3, 1, 2`` for 4 rows), so that the last owner group's psum chains are the
    shortest."""
    return sorted(range(rows), key=lambda r: (-abs(2 * r - (rows - 1)), r))


def balanced_order(costs, groups):
    """An order of the outputs: the ``groups`` (arrays of outputs) one after another, and
    within each, repeatedly the output after which the rows' cumulative dispatcher cycles
    (``costs``: ``(rows, n_out)``) lie closest together (the smallest spread, the earliest of
    the group on a tie)."""
    costs = np.asarray(costs, dtype=np.int64)
    total = np.zeros(costs.shape[0], dtype=np.int64)
    order = []
    for group in groups:
        group = np.asarray(group, dtype=np.int64)
        own = costs[:, group].T                           # (len(group), rows)
        left = np.ones(group.size, dtype=bool)
        for _ in range(group.size):
            after = total + own
            spread = np.where(left, after.max(axis=1) - after.min(axis=1), np.iinfo(np.int64).max)
            j = int(np.argmin(spread))
            left[j] = False
            total += own[j]
            order.append(int(group[j]))
    return np.array(order, dtype=np.int64)
