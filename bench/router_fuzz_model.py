"""Reference model of the router under reconfiguration mid-traffic, and the checker of its
outputs: where each wavelet goes, given the cycle in which its input took it.

The router looks a wavelet's route up in the cycle its input takes it, so the outcome of traffic
meeting a route change depends on when each word was taken. The fuzz harness reports that cycle
for every word (the inputs' timing is the router's own, under random idle and backpressure), and
the model applies the router's contract (``docs/router.md``, "Routes in flight"):

- a wavelet is routed by its color's route as it stands in the cycle it is taken, and keeps
  that route while it waits (a rewrite, switch or teardown does not reach a queued wavelet);
- an update (a configuration for this router, or a switch command that is not dropped and whose
  color is not torn down) taken in cycle ``t`` waits in its input's slot from cycle ``t + 1``;
  the route state grants one slot a cycle, round robin from the input after the one it last
  granted, and an update granted in cycle ``g`` is seen by every lookup from cycle ``g + 2``;
- a wavelet taken while its color is torn down waits at its queue head and is routed (or
  dropped) by the route the reopening ``SWITCH RESET`` leaves; a switch command so held changes
  nothing. The stimulus keeps such a color's route fixed from its reopening to the end of the
  batch (:class:`AmbiguousStimulus` otherwise), so the cycle of that second lookup does not
  matter.

Every word a batch delivers is unique (each carries an id), so the checker matches outputs to
expected copies by value, all in numpy.
"""

from collections import Counter
from dataclasses import dataclass

import numpy as np

from wse.rtl.wavelet import CONFIG, WAVELET, ConfigOp, ControlOp

__all__ = ["AmbiguousStimulus", "Expected", "TimedRouterModel", "check_outputs"]

PORTS = 5
_SWITCH = (ControlOp.ADVANCE.value, ControlOp.RESET.value, ControlOp.TEARDOWN.value)
_HOPS_ONE = 1 << CONFIG.fields["hops"][0]
_SEQ = 1 << 32             # an input's word index, below the ordering key's group


class AmbiguousStimulus(ValueError):
    """The stimulus has no single correct outcome (see the module docstring)."""


@dataclass
class Expected:
    """One batch's expected copies per output: ``words[o]``, and for each the ordering group
    ``group[o]`` (input * 32 + color) and its index in its input's stream ``seq[o]``."""
    words: list
    group: list
    seq: list
    drops: int


class TimedRouterModel:
    """Route state of one router, moved by the updates of each batch in the order and at the
    cycles the router's update engine applies them.

    ``visible_after`` is the contract's 2 (an update granted in cycle ``g`` is seen from
    ``g + 2``); the self-test mutates it to show the checker notices.
    """

    def __init__(self, router, *, visible_after=2):
        self.n_colors = router.n_colors
        self.cfg_color = router.cfg_color
        self.cfg_rx, self.cfg_tx = router.cfg_route.rx, router.cfg_route.tx
        self.u_turns = router.u_turns
        self.visible_after = visible_after
        self.rx = np.zeros((self.n_colors, 4), dtype=np.int64)
        self.tx = np.zeros((self.n_colors, 4), dtype=np.int64)
        self.last = np.zeros(self.n_colors, dtype=np.int64)
        for color in range(self.n_colors):
            positions = router.routes[color]
            for k, position in enumerate(positions):
                self.rx[color, k], self.tx[color, k] = position.rx, position.tx
            self.last[color] = max(len(positions), 1) - 1
        self.current = np.zeros(self.n_colors, dtype=np.int64)
        self.torn = np.zeros(self.n_colors, dtype=bool)
        self.granted_last = PORTS - 1          # the round robin's reset value
        self._waits = []          # a batch's (input, cycle taken, cycle its update is seen from)
        self.counts = Counter()

    def _route(self, color):
        k = self.current[color]
        return int(self.rx[color, k]), int(self.tx[color, k]), bool(self.torn[color])

    def batch(self, streams, taken):
        """The :class:`Expected` copies of one batch: ``streams[k]`` the words input ``k``
        got, ``taken[k]`` the cycle each was taken in."""
        words = np.concatenate([np.asarray(s, dtype=np.uint64) for s in streams])
        port = np.concatenate([np.full(len(s), k) for k, s in enumerate(streams)])
        seq = np.concatenate([np.arange(len(s)) for s in streams])
        t = np.concatenate([np.asarray(c, dtype=np.int64) for c in taken])
        if len(t) != len(words):
            raise RuntimeError(f"the harness reported {len(t)} words taken of {len(words)}")
        fields = WAVELET.unpack(words)
        color, ctrl, data = fields["color"], fields["ctrl"], fields["data"]
        cfg = CONFIG.unpack(data)
        is_cfg = color == self.cfg_color
        consume = is_cfg & (cfg["hops"] == 0)
        bad_cfg = consume & ((cfg["target"] >= self.n_colors) |
                             ~np.isin(cfg["op"], [op.value for op in ConfigOp]))
        op = data >> 28
        is_switch = (ctrl == 1) & ~is_cfg & np.isin(op, _SWITCH) & (color < self.n_colors)
        applied = consume & ~bad_cfg & (((self.cfg_rx >> port) & 1) == 1)
        versions = self._updates(applied, is_switch, port, t, color, op, cfg)

        # Each word's route: the cycle it was taken picks its color's version.
        rx = np.zeros(len(words), dtype=np.int64)
        tx = np.zeros(len(words), dtype=np.int64)
        routable = ~is_cfg & (color < self.n_colors)
        torn_words = raced = 0
        for c in np.unique(color[routable]):
            pick = np.flatnonzero(routable & (color == c))
            vis, v_rx, v_tx, v_torn = (np.array(v) for v in zip(*versions[int(c)]))
            index = np.searchsorted(vis, t[pick], side="right") - 1
            raced += int((np.searchsorted(vis, t[pick] - 2, side="right") !=
                          np.searchsorted(vis, t[pick] + 3, side="right")).sum())
            held = v_torn[index]
            if held.any():
                index = index.copy()
                index[held] = self._reopening(v_torn, index[held], int(c))
                torn_words += int(held.sum())
            rx[pick], tx[pick] = v_rx[index], v_tx[index]
        rx[is_cfg], tx[is_cfg] = self.cfg_rx, self.cfg_tx
        if not self.u_turns:
            tx &= ~(1 << port)
        drop = ~consume & ((((rx >> port) & 1) == 0) | (tx == 0))
        drop |= consume & ((((rx >> port) & 1) == 0) | bad_cfg)
        leaving = np.where(is_cfg, words - np.uint64(_HOPS_ONE), words)
        group = port * 32 + color
        expected = Expected([], [], [], int(drop.sum()))
        for o in range(PORTS):
            mask = ~drop & ~consume & (((tx >> o) & 1) == 1)
            expected.words.append(leaving[mask])
            expected.group.append(group[mask])
            expected.seq.append(seq[mask])
        self.counts["early_takes"] += self._early_takes(taken)
        self.counts.update({
            "torn_wavelets": torn_words, "raced_wavelets": raced, "bad_configs": int(bad_cfg.sum()),
            "forwarded_configs": int((is_cfg & ~consume & ~drop).sum())})
        return expected

    def _early_takes(self, taken):
        """Inputs that took a word before their own update was seen (the router's input waits
        for it, so its next wavelet is routed by it): a contract broken whatever the routes."""
        early = 0
        for p, cycle, seen in self._waits:
            cycles = np.asarray(taken[p])
            after = np.searchsorted(cycles, cycle, side="right")
            early += int(after < len(cycles) and cycles[after] < seen)
        return early

    def _reopening(self, torn, index, color):
        """The version a torn wavelet is routed by: the first after ``index`` that is not torn,
        which must be its color's last in the batch."""
        open_after = np.flatnonzero(~torn)
        where = np.searchsorted(open_after, index, side="right")
        if (where >= len(open_after)).any():
            raise AmbiguousStimulus(f"color {color} is torn down and never reopened")
        if open_after[-1] != len(torn) - 1 or (where != len(open_after) - 1).any():
            raise AmbiguousStimulus(f"color {color}'s route changes after its reopening while "
                                    f"wavelets taken torn down may still be waiting")
        return open_after[where]

    def _updates(self, config, is_switch, port, t, color, op, cfg):
        """Run the update engine over the batch; each color's versions as
        ``[(visible from cycle, rx, tx, torn), ...]``, the first the state at the start."""
        versions = {c: [(-1, *self._route(c))] for c in range(self.n_colors)}
        self._waits = []
        pending = {}                  # input -> (cycle taken, update)
        engine = [-1]                 # the first cycle the engine may grant in

        def grant(winner, g):
            self.granted_last, engine[0] = winner, g + 1
            taken, update = pending.pop(winner)
            self._waits.append((winner, taken, g + 2))
            c = self._apply(update)
            versions[c].append((g + self.visible_after, *self._route(c)))

        def advance(limit):
            while pending:
                g = max(engine[0], min(taken for taken, _ in pending.values()) + 1)
                if g > limit:
                    return
                for k in range(1, PORTS + 1):
                    winner = (self.granted_last + k) % PORTS
                    if winner in pending and pending[winner][0] + 1 <= g:
                        break
                grant(winner, g)

        events = np.flatnonzero(config | is_switch)
        for i in events[np.lexsort((port[events], t[events]))]:
            p, cycle = int(port[i]), int(t[i])
            advance(cycle - 2)
            if p in pending:        # taken before its last update was seen: `early_takes`
                grant(p, max(engine[0], pending[p][0] + 1))
            if config[i]:
                update = ("write" if cfg["op"][i] == ConfigOp.WRITE_ROUTE.value else "cmd",
                          int(cfg["target"][i]), int(cfg["cmd"][i]), int(cfg["position"][i]),
                          int(cfg["last"][i]), int(cfg["rx"][i]), int(cfg["tx"][i]), True)
            else:
                rx, tx, torn = self._route(int(color[i]))
                if not self.u_turns:
                    tx &= ~(1 << p)
                if torn:
                    self.counts["stale_switches"] += 1
                    continue
                if not (rx >> p) & 1 or tx == 0:
                    continue
                update = ("cmd", int(color[i]), int(op[i]), 0, 0, 0, 0, False)
            pending[p] = (cycle, update)
        advance(np.iinfo(np.int64).max)
        return versions

    def _apply(self, update):
        kind, c, cmd, position, last, rx, tx, configured = update
        counts = self.counts
        counts["reconfigurations" if configured else "switch_commands"] += 1
        if kind == "write":
            self.rx[c, position], self.tx[c, position], self.last[c] = rx, tx, last
            counts["route_writes"] += 1
            return c
        if cmd == ControlOp.ADVANCE.value:
            self.current[c] = 0 if self.current[c] >= self.last[c] else self.current[c] + 1
            counts["advances"] += 1
        elif cmd == ControlOp.RESET.value:
            if self.torn[c]:
                counts["reopened"] += 1
            self.current[c], self.torn[c] = 0, False
            counts["resets"] += 1
        elif cmd == ControlOp.TEARDOWN.value:
            counts["teardowns"] += 1
            self.torn[c] = True
        return c


def check_outputs(expected, delivered):
    """Compare what each output delivered with the :class:`Expected` copies: a Counter of
    ``copies``, ``delivered``, ``lost``, ``reordered`` (a copy after a later one of its input
    and color on that output) and ``unexpected`` (matching no copy, or a copy again)."""
    result = Counter()
    for o in range(PORTS):
        words, group, seq = expected.words[o], expected.group[o], expected.seq[o]
        got = np.asarray(delivered[o], dtype=np.uint64)
        order = np.argsort(words, kind="stable")
        ordered = words[order]
        if len(ordered) > 1 and (ordered[1:] == ordered[:-1]).any():
            raise AmbiguousStimulus(f"output {o} expects one word twice")
        at = np.minimum(np.searchsorted(ordered, got), max(len(ordered) - 1, 0))
        hit = (ordered[at] == got) if len(ordered) else np.zeros(len(got), dtype=bool)
        matched = order[at[hit]]
        unique, first = np.unique(matched, return_index=True)
        arrivals = matched[np.sort(first)]             # each copy once, in arrival order
        keys = group[arrivals] * _SEQ + seq[arrivals]
        keys = keys[np.argsort(group[arrivals], kind="stable")]
        before = np.maximum.accumulate(np.concatenate([[-1], keys[:-1]]))
        result.update({"copies": len(words), "delivered": len(unique),
                       "lost": len(words) - len(unique),
                       "unexpected": int((~hit).sum()) + len(matched) - len(unique),
                       "reordered": int((keys < before).sum())})
    return result
