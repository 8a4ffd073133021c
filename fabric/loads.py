"""How a program's ``X`` goes into the cores, and how long that takes (``docs/mesh.md``, "Edge
transfers").

A row's load stream enters its west intake a wavelet a cycle and crosses the row; each core
keeps the ``cmd`` wavelets of its column (SELECT). :func:`load_streams` sends, for each column,
``SELECT``, ``TOKENS`` and (where the core holds features) ``ADDR`` with ``pairs``, then the
words as LOAD pairs, two operands a wavelet: a core writes one word a cycle, so a pair takes it
two, and the stream deals the pairs out in rounds, at most :data:`GROUP` to a column before the
next column's, so that every core writes while the others' pairs go by and none holds the row
up (its command FIFO never fills). A core with an odd number of words gets its first one alone
(``ADDR`` without ``pairs``, a LOAD, then ``ADDR`` with ``pairs`` of the second word). A
resident program (``load=False``) sends ``SELECT`` and ``TOKENS`` alone.

:func:`load_cycles` follows each row's stream through its cores: a wavelet enters a cycle
after the one before unless its core's command FIFO is full, reaches the core of column ``c``
``LOAD_HOP * (c + 1)`` cycles after it entered, and waits for the commands before it; the
exchange ends ``LOAD_EXTRA`` cycles after the last core's last write.
"""

import numpy as np

from wse.rtl import isa
from wse.rtl.wavelet import pack

from . import numerics

__all__ = ["GROUP", "LOAD_HOP", "LOAD_EXTRA", "load_streams", "load_cycles"]

#: LOAD pairs a column takes in a row before the next column's: a core writes them in twice as
#: many cycles as they take to arrive, so half of them wait in its command FIFO, which takes a
#: word only with room for one more behind the ramp's register. With 4 the stream never waits
#: and :func:`load_cycles` is exact against the RTL (``tests/test_io_cycles.py``); with 5 a core
#: holds its row up now and then (up to 4 cycles a load on the meshes of that test).
GROUP = 4
#: Cycles a wavelet takes from a row's intake to the core of column ``c``: ``LOAD_HOP * (c +
#: 1)``; and from the last core's last write to the end of the exchange. Fitted to the RTL.
LOAD_HOP, LOAD_EXTRA = 2, 2
#: The command FIFO's entries (``rtl.core.Core``'s ``cmd_depth``).
DEPTH = 4


def _plan(program):
    """``{row: [(column or None, kind, argument)]}``: each row's load stream as items (column
    ``None``: a SELECT, which every core takes at its ramp; kinds ``select``, ``tokens``,
    ``addr``, ``pair``, ``single``), without the data."""
    cfg = program.config
    active = program.active_tokens().tolist()
    first, count = (a.tolist() for a in program.load_slots())
    plan = {}
    for r in range(cfg.rows):
        items = []
        words = [count[r] * active[c] if program.load else 0 for c in range(cfg.cols)]
        for c in range(cfg.cols):
            items += [(None, "select", c), (c, "tokens", active[c])]
            if words[c] % 2:            # an odd word first, alone, then the pairs after it
                second = (first[r] + 1 // active[c]) * cfg.n_tok + 1 % active[c]
                items += [(c, "addr", (first[r] * cfg.n_tok, False)), (c, "single", 0),
                          (c, "addr", (second, True))]
            elif words[c]:
                items.append((c, "addr", (first[r] * cfg.n_tok, True)))
        odd = [w % 2 for w in words]
        pairs = [w // 2 for w in words]
        rounds = max([-(-p // GROUP) for p in pairs], default=0)
        done = [0] * cfg.cols
        for j in range(rounds):
            for c in range(cfg.cols):
                share = pairs[c] * (j + 1) // rounds - done[c]
                if share:
                    items.append((None, "select", c))
                    items += [(c, "pair", odd[c] + 2 * (done[c] + k)) for k in range(share)]
                    done[c] += share
        plan[r] = items
    return plan


def load_streams(program, X=None):
    """``{row: [wavelets]}``: the load exchange of ``program`` (the module's docstring), its
    words from :meth:`~fabric.program.GemmProgram.x_blocks` (row-major: slot, then local
    token; the core's load pointer steps over the inactive tokens)."""
    cfg = program.config
    active = program.active_tokens().tolist()
    first = program.load_slots()[0].tolist()
    blocks = program.x_blocks(X) if program.load else {}
    streams = {}
    for r, items in _plan(program).items():
        words = {c: numerics.to_wire(cfg.fmt, blocks[(r, c)][first[r]:, :active[c]].ravel())
                 for c in range(cfg.cols) if (r, c) in blocks}
        data = np.zeros(len(items), dtype=np.int64)
        kinds = np.array([kind for _, kind, _ in items])
        for kind in ("select", "tokens", "addr", "pair", "single"):
            at = np.flatnonzero(kinds == kind)
            if not at.size:
                continue
            got = [items[k] for k in at.tolist()]
            if kind == "select":
                data[at] = isa.select_data(np.array([a for _, _, a in got]))
            elif kind == "tokens":
                data[at] = isa.tokens_data(np.array([a for _, _, a in got]))
            elif kind == "addr":
                data[at] = isa.addr_data(np.array([a[0] for _, _, a in got]),
                                         pairs=np.array([a[1] for _, _, a in got]))
            else:
                cols = np.array([c for c, _, _ in got])
                index = np.array([a for _, _, a in got])
                low, high = np.zeros(at.size, dtype=np.int64), np.zeros(at.size, dtype=np.int64)
                for c in np.unique(cols).tolist():
                    mine = cols == c
                    low[mine] = words[c][index[mine]]
                    if kind == "pair":
                        high[mine] = words[c][index[mine] + 1]
                data[at] = isa.load_data(low, high)
        ctrl = np.isin(kinds, ("select", "tokens", "addr")).astype(np.int64)
        streams[r] = pack(data, cfg.plan.cmd, ctrl).tolist() if items else []
    return streams


def load_cycles(program):
    """The cycles of ``program``'s load exchange (the module's docstring)."""
    end = 0
    for items in _plan(program).values():
        t = 0                                  # the cycle the next wavelet enters the row
        free = {}                              # core -> the cycle its dispatcher is free
        queued = {}                            # core -> the cycles its queued commands leave
        last = None
        for c, kind, _ in items:
            if c is None:
                t += 1
                continue
            arrive = t + LOAD_HOP * (c + 1)
            pending = [f for f in queued.get(c, []) if f > arrive]
            if len(pending) >= DEPTH:          # the FIFO is full: the row waits for it
                arrive = sorted(pending)[len(pending) - DEPTH]
                t = arrive - LOAD_HOP * (c + 1)
            start = max(arrive, free.get(c, 0))
            free[c] = start + (2 if kind == "pair" else 1)
            queued[c] = [*pending, free[c]]
            last = free[c] if last is None else max(last, free[c])
            t += 1
        if last is not None:
            end = max(end, last + LOAD_EXTRA)
    return end
