"""The router's long fuzz with reconfiguration mid-traffic, on the compiled harness.

Batches of random traffic (``batch`` wavelets each, run until the router is idle) go through
the Verilated router (:mod:`sim.router_compiled`) under random idle and backpressure, and each is
checked against :class:`~bench.router_fuzz_model.TimedRouterModel`. While traffic flows, every
input sends configuration wavelets that rewrite routes and switch positions (any color but the
ones being torn down, from any input), switch commands (``ADVANCE``, ``RESET``), forwarded and
malformed configurations, multicast routes and routes that drop. Each batch also tears colors
down: an input owns such a color for the batch (it alone sends its updates; inputs that own
none send its data too, which their queues hold while it is down), sends ``TEARDOWN`` (a control
wavelet or a configuration), then at most a queue's depth of words for that color's queue, which
wait, with rewrites of the torn color among them, then the ``SWITCH RESET`` that reopens it,
then more of its traffic and no further change to its route. An owner never sends another's
torn-down color, so it is never held by another input's teardown and always reaches its
reopening, which frees the others.
"""

import time
from collections import Counter

import numpy as np

from wse.rtl.wavelet import CONFIG, WAVELET, ConfigOp, ControlOp
from wse.sim.router_compiled import PORTS, RouterHarness, build_router_harness
from wse.sim.router_run import testbench_router

from .router_fuzz_model import TimedRouterModel, check_outputs

__all__ = ["fuzz_router", "batch_streams"]

#: Base traffic: the share of each kind of word.
_KINDS = {"data": 0.80, "control": 0.04, "switch": 0.03, "write": 0.04, "cfg_switch": 0.02,
          "forward": 0.04, "bad_config": 0.005, "unrouted": 0.015}
_OTHER_OPS = [ControlOp.NOP, ControlOp.CR, ControlOp.ADDR, ControlOp.READ, ControlOp.CR_OUT]
_ALL = (1 << PORTS) - 1


class _Stream:
    """One input's words as field arrays, ids filled in at the end (``uid``: 1 a data word's
    whole data, 2 a control word's argument, 3 a forwarded configuration's low bits)."""

    def __init__(self):
        self.chunks = []

    def add(self, color, ctrl=0, data=0, uid=0):
        self.chunks.append(tuple(np.atleast_1d(np.asarray(v, dtype=np.int64))
                                 for v in (color, ctrl, data, uid)))

    def extend(self, fields):
        self.chunks.append(fields)

    def arrays(self):
        if not self.chunks:
            return [np.zeros(0, dtype=np.int64)] * 4
        return [np.concatenate([c[k] for c in self.chunks]) for k in range(4)]


def _routes(rng, n):
    rx = np.where(rng.random(n) < 0.7, _ALL, rng.integers(1, _ALL + 1, n))
    tx = np.where(rng.random(n) < 0.97, rng.integers(1, _ALL + 1, n), 0)
    return rx, tx


def _config(cfg_color, op, target, **fields):
    return cfg_color, 0, int(CONFIG.pack(op=op, target=target, hops=0, **fields)), 0


def _writes(rng, target):
    """Configuration words writing a random position of each color in ``target``."""
    n = len(target)
    rx, tx = _routes(rng, n)
    return CONFIG.pack(op=ConfigOp.WRITE_ROUTE.value, target=target, hops=0,
                       position=rng.integers(0, 4, n), last=rng.integers(0, 4, n), rx=rx,
                       tx=tx).astype(np.int64)


def _cfg_switch(cfg_color, target, cmd):
    return _config(cfg_color, ConfigOp.SWITCH.value, target, cmd=cmd.value)


def _base(rng, count, open_colors, n_colors, cfg_color):
    """``count`` words of base traffic (no torn-down color's), as field arrays."""
    probs = np.array(list(_KINDS.values()))
    kind = rng.choice(len(_KINDS), size=count, p=probs / probs.sum())
    color = rng.choice(np.asarray(open_colors), size=count)
    ctrl = np.zeros(count, dtype=np.int64)
    data = np.zeros(count, dtype=np.int64)
    uid = np.ones(count, dtype=np.int64)
    names = list(_KINDS)

    def of(name):
        return kind == names.index(name)

    control = of("control")
    ops = np.array([op.value for op in _OTHER_OPS])[rng.integers(0, len(_OTHER_OPS), count)]
    ctrl[control], data[control], uid[control] = 1, ops[control] << 28, 2
    switch = of("switch")
    ops = np.where(rng.random(count) < 0.7, ControlOp.ADVANCE.value, ControlOp.RESET.value)
    ctrl[switch], data[switch], uid[switch] = 1, ops[switch] << 28, 2
    write = of("write")
    data[write] = _writes(rng, color[write])
    cfg_switch = of("cfg_switch")
    cmds = np.array([ControlOp.ADVANCE.value, ControlOp.RESET.value, ControlOp.NOP.value])
    data[cfg_switch] = CONFIG.pack(op=ConfigOp.SWITCH.value, target=color[cfg_switch], hops=0,
                                   cmd=cmds[rng.integers(0, 3, int(cfg_switch.sum()))])
    forward = of("forward")                 # passes on with hops - 1; its id in the low bits
    data[forward], uid[forward] = rng.integers(1, 64, int(forward.sum())) << 26, 3
    bad = of("bad_config")
    n_bad = int(bad.sum())
    data[bad] = np.where(rng.random(n_bad) < 0.5,
                         CONFIG.pack(op=ConfigOp.WRITE_ROUTE.value, hops=0,
                                     target=rng.integers(n_colors, 32, n_bad)),
                         CONFIG.pack(op=rng.integers(2, 4, n_bad), hops=0, target=color[bad]))
    unrouted = of("unrouted")
    color[unrouted] = rng.integers(n_colors, cfg_color, int(unrouted.sum()))
    configuration = write | cfg_switch | forward | bad
    color[configuration] = cfg_color
    uid[write | cfg_switch | bad] = 0
    return color, ctrl, data, uid


def _teardown_epoch(rng, stream, color, open_colors, cfg_color, depth, n_queues):
    """TEARDOWN of ``color``, at most ``depth`` words for its queue while it is down (its own,
    held, and others' behind them), rewrites of it, then the reopening ``SWITCH RESET``."""
    if rng.random() < 0.5:
        stream.add(color, 1, ControlOp.TEARDOWN.value << 28, 2)
    else:
        stream.add(*_cfg_switch(cfg_color, color, ControlOp.TEARDOWN))
    same = [c for c in open_colors if c % n_queues == color % n_queues]
    other = [c for c in open_colors if c % n_queues != color % n_queues]
    held = int(rng.integers(1, depth + 1))
    for _ in range(held + int(rng.integers(0, 12))):
        roll = rng.random()
        if held and roll < 0.7:
            held -= 1
            pick = rng.random()
            if pick < 0.7 or not same:
                op = 0 if pick < 0.6 else [ControlOp.ADVANCE, ControlOp.RESET,
                                           ControlOp.NOP][int(rng.integers(3))].value
                stream.add(color, int(pick >= 0.6), op << 28, 1 + (pick >= 0.6))
            else:
                stream.add(int(rng.choice(same)), uid=1)
        elif roll < 0.6:
            stream.add(cfg_color, 0, _writes(rng, [color]), 0)
        elif roll < 0.65:
            stream.add(*_cfg_switch(cfg_color, color, ControlOp.ADVANCE))
        elif roll < 0.8 and other:
            stream.add(int(rng.choice(other)), uid=1)
        else:
            stream.add(cfg_color, 0, int(rng.integers(1, 64)) << 26, 3)
    stream.add(*_cfg_switch(cfg_color, color, ControlOp.RESET))


def batch_streams(rng, count, *, n_colors, cfg_color, depth, n_queues, program=False):
    """One batch's words per input (as :class:`_Stream`, ids still to fill in) and the colors
    torn down, by input."""
    colors = [int(c) for c in rng.permutation(n_colors)]
    torn = {p: colors.pop() for p in range(PORTS) if rng.random() < 0.6 and not program}
    open_colors = colors
    streams = []
    for p in range(PORTS):
        stream = _Stream()
        if program and p == 0:             # every position of every color written first
            targets = np.repeat(np.arange(n_colors), 4)
            rx, tx = _routes(rng, len(targets))
            stream.extend((np.full(len(targets), cfg_color), np.zeros(len(targets), np.int64),
                           CONFIG.pack(op=ConfigOp.WRITE_ROUTE.value, target=targets, hops=0,
                                       position=np.tile(np.arange(4), n_colors), last=3,
                                       rx=rx, tx=tx).astype(np.int64),
                           np.zeros(len(targets), np.int64)))
        size = int(rng.integers(count // PORTS // 2, count // PORTS * 3 // 2 + 1))
        if p in torn:
            c = torn[p]
            before, after = sorted(int(v) for v in rng.integers(0, size + 1, size=2))
            stream.extend(_mixed(rng, before, open_colors, c, n_colors, cfg_color, True))
            _teardown_epoch(rng, stream, c, open_colors, cfg_color, depth, n_queues)
            stream.extend(_mixed(rng, after - before, open_colors, c, n_colors, cfg_color,
                                 False))
            stream.extend(_base(rng, size - after, open_colors, n_colors, cfg_color))
        else:
            fields = _base(rng, size, open_colors, n_colors, cfg_color)
            if torn:                # others' torn-down colors too, data only: held, never stuck
                color, ctrl, _, uid = fields
                theirs = (uid == 1) & (ctrl == 0) & (rng.random(size) < 0.03)
                color[theirs] = rng.choice(list(torn.values()), int(theirs.sum()))
            stream.extend(fields)
        streams.append(stream)
    return streams, torn


def _mixed(rng, count, open_colors, color, n_colors, cfg_color, updates):
    """Base traffic with a fifth ``color``'s own among it (its switch commands and rewrites
    too when ``updates``, else only data and carriage returns)."""
    fields = _base(rng, count, open_colors, n_colors, cfg_color)
    c, ctrl, data, uid = fields
    roll = rng.random(count)
    own = roll < 0.2
    c[own], ctrl[own], data[own], uid[own] = color, 0, 0, 1
    command = (roll >= 0.2) & (roll < 0.23)
    ops = (rng.integers(ControlOp.ADVANCE.value, ControlOp.RESET.value + 1, count) if updates
           else np.full(count, ControlOp.CR.value))
    c[command], ctrl[command], data[command], uid[command] = color, 1, ops[command] << 28, 2
    if updates:
        write = (roll >= 0.23) & (roll < 0.25)
        c[write], ctrl[write], uid[write] = cfg_color, 0, 0
        data[write] = _writes(rng, np.full(int(write.sum()), color))
    return c, ctrl, data, uid


def _pack(streams, next_id):
    """Packed words with ids: data words carry it whole, control words in their 28-bit
    argument, forwarded configurations in their 26 bits below ``hops``."""
    packed = []
    for stream in streams:
        color, ctrl, data, uid = stream.arrays()
        ids = next_id + np.arange(len(color))
        next_id += len(color)
        data = np.where(uid == 1, ids & 0xFFFFFFFF, data)
        data = np.where(uid == 2, data | (ids & 0xFFFFFFF), data)
        data = np.where(uid == 3, data | (ids & 0x3FFFFFF), data)
        packed.append(WAVELET.pack(data=data, color=color, ctrl=ctrl).astype(np.uint64))
    return packed, next_id


def _pacing(rng):
    """Per batch: every port at full rate, or random idle, or heavy backpressure, or mixed."""
    mode = rng.integers(4)
    if mode == 0:
        return (1.0,) * PORTS, (1.0,) * PORTS
    if mode == 1:
        return tuple(rng.uniform(0.3, 1, PORTS)), tuple(rng.uniform(0.3, 1, PORTS))
    if mode == 2:
        return (1.0,) * PORTS, tuple(rng.uniform(0.05, 0.3, PORTS))
    return tuple(rng.choice([1.0, 0.2, 0.6], PORTS)), tuple(rng.choice([1.0, 0.1, 0.5], PORTS))


def fuzz_router(count, *, seed=1, batch=10_000, visible_after=2, corrupt=None,
                progress=None, router=None):
    """Run ``count`` wavelets; the figures as a dict (the checks are the caller's to judge).

    ``visible_after`` and ``corrupt`` (a function given each batch's delivered words per output,
    returning them altered) are the self-test's seeded bugs. ``progress(done, figures)`` is
    called after every batch. ``router``: another design than the testbench's (a mutant), with
    its parameters.
    """
    started = time.monotonic()
    router = testbench_router() if router is None else router
    executable, build_seconds = build_router_harness(router)
    model = TimedRouterModel(router, visible_after=visible_after)
    rng = np.random.default_rng(seed)
    totals = Counter()
    drops_before, next_id, done, harness_seconds = 0, 1, 0, 0.0
    with RouterHarness(executable) as harness:
        while done < count:
            streams, torn = batch_streams(
                rng, min(batch, count - done), n_colors=router.n_colors,
                cfg_color=router.cfg_color, depth=router.depth, n_queues=router.n_queues,
                program=done == 0)
            words, next_id = _pack(streams, next_id)
            offer, ready = _pacing(rng)
            tick = time.monotonic()
            result = harness.batch(words, seed=int(rng.integers(1 << 62)), offer=offer,
                                   ready=ready)
            harness_seconds += time.monotonic() - tick
            expected = model.batch(words, result.taken)
            delivered = corrupt(result.delivered) if corrupt else result.delivered
            totals.update(check_outputs(expected, delivered))
            totals.update({"wavelets": sum(len(w) for w in words), "batches": 1,
                           "cycles": result.cycles, "drops_expected": expected.drops,
                           "drops_counted": result.drops - drops_before})
            drops_before = result.drops
            done += sum(len(w) for w in words)
            if progress:
                progress(done, totals)
    figures = {key: int(totals[key]) for key in (
        "wavelets", "batches", "cycles", "copies", "delivered", "lost", "reordered",
        "unexpected", "drops_counted", "drops_expected")}
    figures["early_takes"] = int(model.counts["early_takes"])
    figures.update({key: int(model.counts[key]) for key in (
        "reconfigurations", "route_writes", "switch_commands", "advances", "resets",
        "teardowns", "reopened", "torn_wavelets", "raced_wavelets", "stale_switches",
        "forwarded_configs", "bad_configs")})
    figures.update({"simulator": "verilator (compiled harness)", "seed": seed, "batch": batch,
                    "build_seconds": build_seconds,
                    "harness_seconds": round(harness_seconds, 1),
                    "wall_seconds": round(time.monotonic() - started, 1)})
    return figures
