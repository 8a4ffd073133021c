"""Where features live on a mesh: a feature's row and its slot in that row's cores."""

import numpy as np

from wse.rtl.validate import count, int_array, readonly

__all__ = ["Placement"]


class Placement:
    """Where each of ``n`` features lives: row ``row_of[i]``, slot ``slot_of[i]`` of that row.

    Build one with :meth:`balanced` or :meth:`modulo`, or give the arrays directly (every
    ``(row, slot)`` pair at most once). Immutable: the arrays are read-only.

    Parameters
    ----------
    rows : int
        The mesh's rows.
    row_of, slot_of : 1-D integer arrays of equal length
        Row (``0 .. rows-1``) and slot (``>= 0``) of each feature.
    kind : str
        How it was made (``"balanced"``, ``"packed"``, ``"modulo"``, ``"spanning"``,
        ``"given"``), for messages.
    """

    def __init__(self, rows, row_of, slot_of, *, kind="given"):
        object.__setattr__(self, "rows", count("rows", rows))
        row_of = int_array(row_of, "row_of", 1)
        slot_of = int_array(slot_of, "slot_of", 1)
        if row_of.shape != slot_of.shape:
            raise ValueError(f"row_of and slot_of must have the same length, not "
                             f"{row_of.size} and {slot_of.size}")
        bad = np.flatnonzero((row_of < 0) | (row_of >= self.rows))
        if bad.size:
            raise ValueError(f"row_of must be in 0..{self.rows - 1}, not {int(row_of[bad[0]])} "
                             f"(feature {bad[0]})")
        bad = np.flatnonzero(slot_of < 0)
        if bad.size:
            raise ValueError(f"slot_of must be non-negative, not {int(slot_of[bad[0]])} "
                             f"(feature {bad[0]})")
        if row_of.size:
            key = slot_of * self.rows + row_of
            order = np.argsort(key, kind="stable")
            twice = np.flatnonzero(key[order][1:] == key[order][:-1])
            if twice.size:
                a, b = sorted((int(order[twice[0]]), int(order[twice[0] + 1])))
                raise ValueError(f"features {a} and {b} are both at row {int(row_of[a])} slot "
                                 f"{int(slot_of[a])}")
        object.__setattr__(self, "row_of", readonly(row_of))
        object.__setattr__(self, "slot_of", readonly(slot_of))
        object.__setattr__(self, "kind", str(kind))

    def __setattr__(self, name, value):
        raise AttributeError("a Placement is immutable: build another one")

    @classmethod
    def balanced(cls, W, rows):
        """Input features of ``W`` (``[n_out, n_in]``) sorted by their nonzero count in ``W``'s
        column, most first (ties by index), dealt round-robin: the ``k``-th goes to row
        ``k % rows``, slot ``k // rows``."""
        W = np.asarray(W)
        if W.ndim != 2:
            raise ValueError(f"W must be a 2-D array, not one of shape {W.shape}")
        return cls.balanced_counts(np.count_nonzero(W, axis=0), rows)

    @classmethod
    def balanced_counts(cls, counts, rows):
        """:meth:`balanced` from each input feature's nonzero count (``counts[i]``), as when the
        weights come as compressed rows (``np.bincount(indices, minlength=n_in)``)."""
        rows = count("rows", rows)
        counts = int_array(counts, "counts", 1)
        order = np.argsort(-counts, kind="stable")
        k = np.empty(order.size, dtype=np.int64)
        k[order] = np.arange(order.size)
        return cls(rows, k % rows, k // rows, kind="balanced")

    @classmethod
    def packed_counts(cls, counts, rows):
        """Input features by the longest-first rule: each feature, most nonzeros first (ties by
        index), goes to the row with the fewest nonzeros so far among those with a free slot
        (``ceil(n / rows)`` slots a row, as :meth:`balanced_counts` needs), the lowest such row
        on a tie; slots in the order the features arrive. The rows' totals come out closer than
        dealt round-robin, which gives row 0 the heaviest feature of every group."""
        rows = count("rows", rows)
        counts = int_array(counts, "counts", 1)
        limit = -(-counts.size // rows)
        load = np.zeros(rows, dtype=np.int64)
        used = np.zeros(rows, dtype=np.int64)
        row_of = np.empty(counts.size, dtype=np.int64)
        slot_of = np.empty(counts.size, dtype=np.int64)
        for i in np.argsort(-counts, kind="stable").tolist():
            free = np.flatnonzero(used < limit)
            r = int(free[np.argmin(load[free])])
            row_of[i], slot_of[i] = r, used[r]
            used[r] += 1
            load[r] += counts[i]
        return cls(rows, row_of, slot_of, kind="packed")

    @classmethod
    def modulo(cls, n, rows, *, among=None):
        """Feature ``i`` at row ``i % rows``, slot ``i // rows``; with ``among`` (distinct rows)
        dealt over those rows only: row ``among[i % len(among)]``, slot ``i // len(among)``."""
        rows = count("rows", rows)
        n = count("n", n, minimum=0)
        i = np.arange(n, dtype=np.int64)
        if among is None:
            return cls(rows, i % rows, i // rows, kind="modulo")
        among = int_array(among, "among", 1)
        if not among.size or np.unique(among).size != among.size:
            raise ValueError(f"among must be distinct rows, at least one, not {among.tolist()}")
        return cls(rows, among[i % among.size], i // among.size, kind="modulo")

    @classmethod
    def spanning(cls, has, rows, *, limit=None, among=None):
        """Outputs whose owner lies inside the span of the rows holding their weights, so that
        the psum chain of an output runs through no row outside that span (``docs/mesh.md``,
        "Partial sums"). ``has[o, r]``: row ``r`` streams a weight of output ``o``. Outputs are
        placed narrowest span first, each on the least loaded row of its span that has a free
        slot (``limit`` slots a row; ``among``: only those rows); an output with no weight, or
        whose span is full, goes to the least loaded row of all (beyond ``limit`` only when
        every row is full: :meth:`check_fits` then says so). Slots follow the output index
        within each row."""
        rows = count("rows", rows)
        has = np.asarray(has, dtype=bool)
        if has.ndim != 2 or has.shape[1] != rows:
            raise ValueError(f"has must be (outputs, {rows}) booleans, not shape {has.shape}")
        n = has.shape[0]
        allowed = np.zeros(rows, dtype=bool)
        allowed[np.arange(rows) if among is None else int_array(among, "among", 1)] = True
        limit = n if limit is None else count("limit", limit)
        any_weight = has.any(axis=1)
        lo = np.where(any_weight, has.argmax(axis=1), 0)
        hi = np.where(any_weight, rows - 1 - has[:, ::-1].argmax(axis=1), rows - 1)
        load = np.zeros(rows, dtype=np.int64)
        row_of = np.empty(n, dtype=np.int64)
        for o in np.argsort(np.where(any_weight, hi - lo, rows), kind="stable").tolist():
            free = allowed & (load < limit)
            if not free.any():          # more outputs than slots: check_fits names the row
                free = allowed
            span = free.copy()
            span[:lo[o]] = span[hi[o] + 1:] = False
            pick = span if span.any() else free
            r = int(np.flatnonzero(pick)[np.argmin(load[pick])])
            row_of[o] = r
            load[r] += 1
        slot_of = np.empty(n, dtype=np.int64)
        for r in range(rows):
            mine = np.flatnonzero(row_of == r)
            slot_of[mine] = np.arange(mine.size)
        return cls(rows, row_of, slot_of, kind="spanning")

    def __len__(self):
        return int(self.row_of.size)

    def __eq__(self, other):
        return (isinstance(other, Placement) and self.rows == other.rows
                and np.array_equal(self.row_of, other.row_of)
                and np.array_equal(self.slot_of, other.slot_of))

    __hash__ = None

    def __repr__(self):
        return f"<Placement {self.kind}: {len(self)} features on {self.rows} rows>"

    def slots_per_row(self):
        """Slots each row needs: its highest slot + 1 (0 for an empty row), which is the number
        of its features for a dealt placement."""
        need = np.zeros(self.rows, dtype=np.int64)
        np.maximum.at(need, self.row_of, self.slot_of + 1)
        return need

    def features_of(self, row):
        """The features on ``row``, in order of their index."""
        return np.flatnonzero(self.row_of == row)

    def check_shape(self, name, rows, n, what):
        """``ValueError`` (naming the placement ``name``) unless this places ``n`` features
        (``what``) on ``rows`` rows."""
        if self.rows != rows:
            raise ValueError(f"{name} is for {self.rows} rows, the mesh has {rows}")
        if len(self) != n:
            raise ValueError(f"{name} places {len(self)} features, W has {n} {what}")

    def check_fits(self, limit, what, *, name=None):
        """``ValueError`` if a row needs more than ``limit`` slots; the message says which row,
        how many, the limit (called ``name``) and the placement, as in ``"input features: row 0
        needs 40 slots, but a core holds n_feat=32 (balanced placement of 150 features on 4
        rows)"``."""
        need = self.slots_per_row()
        if need.size and need.max() > limit:
            row = int(need.argmax())
            holds = f"{name}={limit}" if name else f"{limit}"
            raise ValueError(f"{what}: row {row} needs {int(need[row])} slots, but a core holds "
                             f"{holds} ({self.kind} placement of {len(self)} features on "
                             f"{self.rows} row{'s' if self.rows > 1 else ''})")
