"""The router's parts in Amaranth's simulator, each checked against a small Python expectation:
the switch allocator, the crossbar, the route state and one input port."""

import random
import re

import pytest
from amaranth.hdl import ClockDomain, Module, Value, unsigned
from amaranth.lib import data
from amaranth.sim import Simulator

from wse.rtl.allocator import SwitchAllocator
from wse.rtl.crossbar import MUXES, Crossbar
from wse.rtl.isa import route_straps_value
from wse.rtl.route_state import RouteState
from wse.rtl.route_table import MAX_POSITIONS, RouteTable, config_switch, config_write
from wse.rtl.router_input import RouterInput
from wse.rtl.wavelet import (
    CONFIG,
    CONTROL,
    MAX_COLORS,
    WAVELET,
    ControlOp,
    Direction,
    Wavelet,
)

N, E, S, W, R = (d.bit for d in Direction)
PORTS = list(Direction)


def simulate(top, bench, domain=None, *, clock=True):
    """Run ``bench`` on ``top`` with a 100 MHz clock (``domain``: an explicit ``sync`` whose
    ``rst`` the bench may drive; ``clock=False`` for a combinational part)."""
    if domain is not None:
        m = Module()
        m.domains.sync = domain
        m.submodules.dut = top
        top = m
    sim = Simulator(top)
    if clock:
        sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


def rows(word, n, count):
    """The ``count`` ``n``-bit rows of an ``ArrayLayout(n, count)`` value."""
    return [(word >> (k * n)) & ((1 << n) - 1) for k in range(count)]


def join(values, width):
    return sum(v << (k * width) for k, v in enumerate(values))


# Switch allocator ------------------------------------------------------------------------------

class AllocatorModel:
    """Per output: round-robin among the free output's requesters, from the one after the last
    grant; the pointer moves whenever the output grants."""

    def __init__(self, n, pairs):
        self.n, self.pairs = n, pairs
        self.last = [n - 1] * n

    def step(self, requests, free):
        grants = []
        for o in range(self.n):
            asking = [i for i in range(self.n)
                      if requests[i] >> o & 1 and (i, o) in self.pairs and free >> o & 1]
            order = [(self.last[o] + 1 + k) % self.n for k in range(self.n)]
            pick = next((i for i in order if i in asking), None)
            if pick is not None:
                self.last[o] = pick
            grants.append(pick)
        return grants


NO_U_TURNS = {(i, o) for i in range(5) for o in range(5) if i != o}


@pytest.mark.parametrize("pairs", [None, NO_U_TURNS], ids=["all pairs", "no U-turns"])
def test_allocator_matches_round_robin_model(pairs):
    n = 5
    alloc = SwitchAllocator(n, pairs=pairs)
    model = AllocatorModel(n, alloc.pairs)
    rng = random.Random(1)

    async def bench(ctx):
        granted = 0
        for _ in range(400):
            requests = [rng.getrandbits(n) & rng.getrandbits(n) for _ in range(n)]
            free = rng.getrandbits(n) | rng.getrandbits(n)
            ctx.set(alloc.requests.as_value(), join(requests, n))
            ctx.set(alloc.free, free)
            grants = rows(ctx.get(alloc.grants.as_value()), n, n)
            served = rows(ctx.get(alloc.served.as_value()), n, n)
            expected = model.step(requests, free)
            assert grants == [0 if i is None else 1 << i for i in expected]
            assert served == [sum(1 << o for o in range(n) if grants[o] >> i & 1)
                              for i in range(n)], "served is not the transpose of grants"
            if pairs is not None:
                assert all(not grants[o] >> o & 1 for o in range(n)), "a U-turn was granted"
            granted += sum(g != 0 for g in grants)
            await ctx.tick()
        assert granted > 400

    simulate(alloc, bench)


def test_allocator_never_grants_a_missing_pair():
    alloc = SwitchAllocator(5, pairs=NO_U_TURNS)

    async def bench(ctx):
        ctx.set(alloc.requests.as_value(), join([1 << i for i in range(5)], 5))   # U-turns only
        ctx.set(alloc.free, 0b11111)
        for _ in range(6):
            assert ctx.get(alloc.grants.as_value()) == 0
            assert ctx.get(alloc.served.as_value()) == 0
            await ctx.tick()

    simulate(alloc, bench)


def test_allocator_serves_every_persistent_requester_within_n_grants():
    n = 5
    alloc = SwitchAllocator(n)
    rng = random.Random(2)
    persistent = {0: 0b00111, 2: 0b10001, 4: 0b01101}     # input: outputs it always asks for

    async def bench(ctx):
        waited = {(i, o): 0 for i, outs in persistent.items() for o in range(n) if outs >> o & 1}
        served_pairs = set()
        for _ in range(300):
            requests = [persistent.get(i, rng.getrandbits(n)) for i in range(n)]
            ctx.set(alloc.requests.as_value(), join(requests, n))
            ctx.set(alloc.free, rng.getrandbits(n))
            grants = rows(ctx.get(alloc.grants.as_value()), n, n)
            for (i, o) in waited:
                if grants[o] >> i & 1:
                    waited[i, o] = 0
                    served_pairs.add((i, o))
                elif grants[o]:
                    waited[i, o] += 1
                    assert waited[i, o] < n, f"input {i} waited {n} grants of output {o}"
            await ctx.tick()
        assert served_pairs == set(waited)

    simulate(alloc, bench)


# Crossbar --------------------------------------------------------------------------------------

def crossbar_bench(xbar, rng, cycles, *, extra_bits=False):
    """Random inputs and one-hot (or zero) selects; each output is the selected input, or, when
    the select is zero or names a missing pair, zero (a ``"binary"`` crossbar's output of four
    inputs: its first input). ``extra_bits`` also sets select bits of missing pairs on top of a
    one-hot choice among the present ones."""
    width = len(Value.cast(xbar.inputs[0]))
    present = [[i for i in range(xbar.n_in) if (i, o) in xbar.pairs] for o in range(xbar.n_out)]

    def unselected(inputs, o):
        return inputs[present[o][0]] if xbar.mux == "binary" and len(present[o]) == 4 else 0

    async def bench(ctx):
        for _ in range(cycles):
            inputs = [rng.getrandbits(width) for _ in range(xbar.n_in)]
            selects, expected = [], []
            for o in range(xbar.n_out):
                choice = rng.choice([None, *range(xbar.n_in)])
                select = 0 if choice is None else 1 << choice
                if extra_bits:
                    select |= sum(1 << i for i in range(xbar.n_in) if (i, o) not in xbar.pairs)
                selects.append(select)
                expected.append(unselected(inputs, o) if choice is None
                                or (choice, o) not in xbar.pairs else inputs[choice])
            ctx.set(xbar.inputs.as_value(), join(inputs, width))
            ctx.set(xbar.select.as_value(), join(selects, xbar.n_in))
            assert rows(ctx.get(xbar.outputs.as_value()), width, xbar.n_out) == expected
            await ctx.delay(1e-8)

    return bench


@pytest.mark.parametrize("shape, n_in, n_out", [
    (Wavelet, 5, 5),
    (data.ArrayLayout(4, 2), 3, 4),
    (8, 5, 5),
    (unsigned(8), 3, 4),
], ids=["wavelet 5x5", "8-bit layout 3x4", "8 5x5", "unsigned(8) 3x4"])
def test_crossbar_copies_the_selected_input(shape, n_in, n_out):
    xbar = Crossbar(shape, n_in, n_out)
    simulate(xbar, crossbar_bench(xbar, random.Random(3), 100), clock=False)


@pytest.mark.parametrize("mux", MUXES)
def test_crossbar_ignores_missing_pairs(mux):
    pairs = NO_U_TURNS - {(0, 4), (4, 0)}
    rng = random.Random(4)
    for extra_bits in (False, True):
        xbar = Crossbar(Wavelet, 5, 5, pairs=pairs, mux=mux)
        simulate(xbar, crossbar_bench(xbar, rng, 100, extra_bits=extra_bits), clock=False)


def test_binary_crossbar_copies_the_selected_input():
    """A router's crossbar without U-turns (every output of four inputs) as trees of 2:1
    multiplexers: the selected input, the first for a zero select."""
    xbar = Crossbar(Wavelet, 5, 5, pairs=NO_U_TURNS, mux="binary")
    simulate(xbar, crossbar_bench(xbar, random.Random(5), 300), clock=False)


@pytest.mark.parametrize("n_in, n_out, pairs, bad", [
    (5, 5, {(0, 1), (5, 0)}, [(5, 0)]),
    (3, 4, {(0, 4), (2, 3)}, [(0, 4)]),
    (5, 5, {(-1, 0)}, [(-1, 0)]),
])
def test_crossbar_refuses_bad_pairs(n_in, n_out, pairs, bad):
    message = f"pairs must be (input, output) index pairs below ({n_in}, {n_out}), not {bad}"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        Crossbar(8, n_in, n_out, pairs=pairs)


def test_allocator_refuses_bad_pairs():
    message = "pairs must be (input, output) index pairs below (5, 5), not [(5, 0)]"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        SwitchAllocator(5, pairs={(0, 1), (5, 0)})


# Route state -----------------------------------------------------------------------------------

ROUTES = {0: [("W", "E"), ("N", "S"), ("ER", "NW")],
          2: [("NESWR", "R")],
          3: [("S", "N"), ("W", "EN")],
          5: [("E", "NW")]}
N_COLORS = 6


class RouteStateModel:
    """Every color's positions, last and current position and teardown; the lookup a port
    gets. ``routes``: ``{color: [(rx, tx), ...]}`` masks."""

    def __init__(self, n_colors, routes):
        self.positions = {c: (list(routes.get(c, [])) + [(0, 0)] * MAX_POSITIONS)[:MAX_POSITIONS]
                          for c in range(n_colors)}
        self.last = {c: max(len(routes.get(c, [])), 1) - 1 for c in range(n_colors)}
        self.current = dict.fromkeys(range(n_colors), 0)
        self.torn = dict.fromkeys(range(n_colors), 0)

    def apply(self, u):
        c = u["color"]
        if u["write"]:
            self.positions[c][u["position"]] = (u["rx"], u["tx"])
            self.last[c] = u["last"]
        elif u["cmd"] == ControlOp.ADVANCE:
            self.current[c] = 0 if self.current[c] >= self.last[c] else self.current[c] + 1
        elif u["cmd"] == ControlOp.RESET:
            self.current[c], self.torn[c] = 0, 0
        elif u["cmd"] == ControlOp.TEARDOWN:
            self.torn[c] = 1

    def lookup(self, port, color):
        if color not in self.positions:
            return (0, 0, 0)
        rx, tx = self.positions[color][self.current[color]]
        return (rx >> port & 1, tx, self.torn[color])


def masks(routes):
    return {c: [(Direction.mask(rx), Direction.mask(tx)) for rx, tx in positions]
            for c, positions in routes.items()}


def route_state(straps=False, routes=ROUTES):
    """A RouteState for ``routes`` (straps: position 0 only, through ``route_init``), its model
    and the ``route_init`` value."""
    if straps:
        first = {c: positions[:1] for c, positions in masks(routes).items()}
        dut = RouteState(n_colors=N_COLORS, straps=True)
        return dut, RouteStateModel(N_COLORS, first), route_straps_value(
            N_COLORS, {c: p[0] for c, p in first.items()})
    table = RouteTable(N_COLORS, routes)
    return RouteState(n_colors=N_COLORS, routes=table), RouteStateModel(N_COLORS, masks(routes)), \
        None


def lookup(ctx, dut, port, color, which="arrive"):
    asking = getattr(dut, which)[port]
    ctx.set(asking.color, color)
    route = ctx.get(asking.route)
    return (route.accept, route.tx, route.torn)


def check_table(ctx, dut, model, colors=range(MAX_COLORS)):
    for port in range(5):
        for color in colors:
            for which in ("arrive", "head"):
                assert lookup(ctx, dut, port, color, which) == model.lookup(port, color), \
                    f"{which} lookup of color {color} on port {PORTS[port].name}"


async def walk(ctx, dut):
    """Ticks until ``ready``; returns how many."""
    cycles = 0
    while not ctx.get(dut.ready):
        for port in range(5):
            ctx.set(dut.updates[port].valid, 1)
            assert not ctx.get(dut.updates[port].ready), "an update was taken during the walk"
            ctx.set(dut.updates[port].valid, 0)
        await ctx.tick()
        cycles += 1
        assert cycles <= 2 * N_COLORS
    return cycles


def update(color, cmd=ControlOp.NOP, *, write=0, position=0, last=0, rx=0, tx=0):
    return {"write": write, "color": color, "cmd": cmd, "position": position, "last": last,
            "rx": rx, "tx": tx}


async def send(ctx, dut, port, u):
    """Offer ``u`` on ``port`` until it is taken, then wait until a lookup sees it."""
    ctx.set(dut.updates[port].payload, u)
    ctx.set(dut.updates[port].valid, 1)
    while not ctx.get(dut.updates[port].ready):
        await ctx.tick()
    await ctx.tick()
    ctx.set(dut.updates[port].valid, 0)
    await ctx.tick()


@pytest.mark.parametrize("straps", [False, True], ids=["routes", "straps"])
def test_route_state_walks_then_holds_the_initial_table(straps):
    dut, model, init = route_state(straps)

    async def bench(ctx):
        if straps:
            ctx.set(dut.route_init.as_value(), init)
        assert await walk(ctx, dut) == N_COLORS
        check_table(ctx, dut, model)
        assert lookup(ctx, dut, Direction.E, 0) == (0, E, 0)
        assert lookup(ctx, dut, Direction.W, 0) == (1, E, 0)
        assert lookup(ctx, dut, Direction.N, 1) == (0, 0, 0)       # no route

    simulate(dut, bench)


def test_route_state_switch_commands_and_writes():
    dut, model, _ = route_state()

    async def bench(ctx):
        await walk(ctx, dut)

        async def apply(port, u):
            await send(ctx, dut, port, u)
            model.apply(u)
            check_table(ctx, dut, model, range(N_COLORS))
            return lookup(ctx, dut, Direction.W, u["color"])

        # ADVANCE walks color 0's three positions and wraps after the last.
        assert await apply(Direction.N, update(0, ControlOp.ADVANCE)) == (0, S, 0)
        assert await apply(Direction.N, update(0, ControlOp.ADVANCE)) == (0, N | W, 0)
        assert await apply(Direction.E, update(0, ControlOp.ADVANCE)) == (1, E, 0)
        # TEARDOWN keeps the position and sets torn; RESET returns to 0 and clears it.
        await apply(Direction.R, update(0, ControlOp.ADVANCE))
        assert await apply(Direction.R, update(0, ControlOp.TEARDOWN)) == (0, S, 1)
        assert await apply(Direction.R, update(0, ControlOp.NOP)) == (0, S, 1)
        assert await apply(Direction.S, update(0, ControlOp.RESET)) == (1, E, 0)
        # A write of the current position shows at once; one of another position only once an
        # ADVANCE reaches it (and the write's `last` extends the positions).
        assert await apply(Direction.W, update(5, write=1, position=0, last=0, rx=W, tx=S)) \
            == (1, S, 0)
        assert await apply(Direction.W, update(5, write=1, position=1, last=1, rx=W, tx=R)) \
            == (1, S, 0)
        assert await apply(Direction.W, update(5, ControlOp.ADVANCE)) == (1, R, 0)
        assert await apply(Direction.W, update(5, ControlOp.ADVANCE)) == (1, S, 0)

    simulate(dut, bench)


def test_route_state_update_is_visible_two_cycles_after_it_is_taken():
    dut, _, _ = route_state()

    async def bench(ctx):
        await walk(ctx, dut)
        ctx.set(dut.updates[Direction.E].payload, update(3, ControlOp.ADVANCE))
        ctx.set(dut.updates[Direction.E].valid, 1)
        assert ctx.get(dut.updates[Direction.E].ready)          # taken in cycle k
        seen = []
        for _ in range(3):                                       # cycles k, k+1, k+2
            seen.append({lookup(ctx, dut, port, 3, which)[1]
                         for port in range(5) for which in ("arrive", "head")})
            await ctx.tick()
            ctx.set(dut.updates[Direction.E].valid, 0)
        assert seen == [{N}, {N}, {E | N}]

    simulate(dut, bench)


def test_route_state_takes_one_update_a_cycle_and_applies_both():
    dut, _, _ = route_state()

    async def bench(ctx):
        await walk(ctx, dut)
        for port, color in ((Direction.N, 3), (Direction.S, 0)):
            ctx.set(dut.updates[port].payload, update(color, ControlOp.ADVANCE))
            ctx.set(dut.updates[port].valid, 1)
        taken = []
        for cycle in range(4):
            for port in (Direction.N, Direction.S):
                if ctx.get(dut.updates[port].valid) and ctx.get(dut.updates[port].ready):
                    taken.append((cycle, port))
            await ctx.tick()
            for _, port in taken:
                ctx.set(dut.updates[port].valid, 0)
        assert taken == [(0, Direction.N), (1, Direction.S)]
        assert lookup(ctx, dut, Direction.W, 3) == (1, E | N, 0)
        assert lookup(ctx, dut, Direction.N, 0) == (1, S, 0)

    simulate(dut, bench)


def test_route_state_random_updates_match_the_model():
    """Random updates on random ports, several at once; every cycle random lookups are
    compared with the model, which applies an update taken in cycle k from cycle k + 2."""
    dut, model, _ = route_state()
    rng = random.Random(5)

    def random_update():
        if rng.random() < 0.4:
            last = rng.randrange(MAX_POSITIONS)
            return update(rng.randrange(N_COLORS), write=1, position=rng.randint(0, last),
                          last=last, rx=rng.getrandbits(5), tx=rng.getrandbits(5))
        return update(rng.randrange(N_COLORS), rng.choice(list(ControlOp)))

    async def bench(ctx):
        await walk(ctx, dut)
        offered, due, taken = {}, {}, 0
        for cycle in range(300):
            for u in due.pop(cycle, []):
                model.apply(u)
            for port in range(5):
                if port not in offered and rng.random() < 0.15:
                    offered[port] = random_update()
                ctx.set(dut.updates[port].valid, port in offered)
                if port in offered:
                    ctx.set(dut.updates[port].payload, offered[port])
            for port in range(5):
                for which in ("arrive", "head"):
                    color = rng.randrange(N_COLORS + 2)
                    assert lookup(ctx, dut, port, color, which) == model.lookup(port, color), \
                        f"cycle {cycle}: {which} lookup of color {color} on port {port}"
            accepted = [p for p in offered if ctx.get(dut.updates[p].ready)]
            assert len(accepted) <= 1
            for port in accepted:
                due.setdefault(cycle + 2, []).append(offered.pop(port))
                taken += 1
            await ctx.tick()
        assert taken > 100

    simulate(dut, bench)


@pytest.mark.parametrize("straps", [False, True], ids=["routes", "straps"])
def test_route_state_reset_restarts_the_walk(straps):
    dut, model, init = route_state(straps)
    domain = ClockDomain("sync")

    async def bench(ctx):
        if straps:
            ctx.set(dut.route_init.as_value(), init)
        await walk(ctx, dut)
        await send(ctx, dut, Direction.W, update(2, ControlOp.TEARDOWN))
        await send(ctx, dut, Direction.W, update(0, write=1, position=0, rx=0, tx=R))
        assert lookup(ctx, dut, Direction.W, 0) == (0, R, 0)
        assert lookup(ctx, dut, Direction.W, 2)[2] == 1
        for _ in range(2):       # a reset after the walk, then one in the middle of the walk
            ctx.set(domain.rst, 1)
            await ctx.tick()
            ctx.set(domain.rst, 0)
            await ctx.tick()
            await ctx.tick()
        assert await walk(ctx, dut) == N_COLORS - 2
        check_table(ctx, dut, model)

    simulate(dut, bench, domain)


# Router input ----------------------------------------------------------------------------------

CFG = 31


def word(color, value=0, ctrl=0):
    return int(WAVELET.pack(data=value, color=color, ctrl=ctrl))


def control(color, op, arg=0):
    return word(color, int(CONTROL.pack(op=op, arg=arg)), ctrl=1)


def fields(w):
    return {k: int(v) for k, v in WAVELET.unpack(w).items()}


def as_int(value):
    """An int from a field read back (an enum member for ``cmd``)."""
    return int(getattr(value, "value", value))


class InputBench:
    """Drives a RouterInput cycle by cycle as the router would: its ``arrive`` and ``head``
    lookups are answered from ``table`` (``{color: (accept, tx, torn)}``, missing colors
    ``(0, 0, 0)``), which ``events`` (``{cycle: function(table)}``) may change; ``served``
    (``function(cycle, request, offer)``) says which requested outputs take the head;
    ``update_ready(cycle)`` is the update engine's ``ready``, and ``engine(update, table)``, if
    given, applies a taken update from the second cycle after. ``run`` returns one dict a cycle.
    """

    def __init__(self, *, table, cfg_route=(1, 0), n_queues=2, depth=3, n_colors=8, port=None,
                 u_turns=True, tag_slots=True):
        self.dut = RouterInput(n_queues=n_queues, depth=depth, n_colors=n_colors, cfg_color=CFG,
                               port=port, u_turns=u_turns, tag_slots=tag_slots)
        self.table = dict(table)
        self.cfg_route = cfg_route
        self.n_queues = n_queues

    def route(self, color):
        accept, tx, torn = self.table.get(color, (0, 0, 0))
        return {"accept": accept, "tx": tx, "torn": torn}

    def queue_of(self, color):
        return color % self.n_queues

    def run(self, arrivals, cycles, *, served=lambda cycle, request, offer: request,
            update_ready=lambda cycle: True, idle=lambda cycle: True, events=None, engine=None):
        dut, log, arrivals = self.dut, [], list(arrivals)
        events = dict(events or {})

        async def bench(ctx):
            accept, tx = self.cfg_route
            ctx.set(dut.cfg_route, {"accept": accept, "tx": tx, "torn": 0})
            ctx.set(dut.enable, 1)
            for cycle in range(cycles):
                if cycle in events:
                    events.pop(cycle)(self.table)
                offered = arrivals[0] if arrivals and idle(cycle) else None
                ctx.set(dut.i.valid, offered is not None)
                if offered is not None:
                    ctx.set(dut.i.payload.as_value(), offered)
                    ctx.set(dut.queue, self.queue_of(fields(offered)["color"]))
                ctx.set(dut.arrive.route, self.route(ctx.get(dut.arrive.color)))
                ctx.set(dut.head.route, self.route(ctx.get(dut.head.color)))
                ctx.set(dut.update.ready, update_ready(cycle))
                request = ctx.get(dut.request)
                offer = ctx.get(dut.offer.as_value())
                took = served(cycle, request, offer) if request else 0
                assert took & ~request == 0
                ctx.set(dut.served, took)
                update = None
                if ctx.get(dut.update.valid) and ctx.get(dut.update.ready):
                    p = ctx.get(dut.update.payload)
                    update = {name: as_int(getattr(p, name)) for name in
                              ("write", "color", "cmd", "position", "last", "rx", "tx")}
                    if engine is not None:      # applied as the route state would
                        events[cycle + 2] = lambda table, u=update: engine(u, table)
                ready = ctx.get(dut.i.ready)
                log.append({"cycle": cycle, "ready": ready,
                            "taken": offered if offered is not None and ready else None,
                            "request": request, "offer": offer, "served": took,
                            "drops": ctx.get(dut.drops), "update": update,
                            "update_valid": ctx.get(dut.update.valid),
                            "empty": ctx.get(dut.empty)})
                if offered is not None and ready:
                    arrivals.pop(0)
                await ctx.tick()
            assert not arrivals, f"{len(arrivals)} arrivals never taken"

        simulate(dut, bench)
        return log


def requested(log):
    """``(cycle, offer, request, served)`` of every cycle with a request."""
    return [(e["cycle"], e["offer"], e["request"], e["served"]) for e in log if e["request"]]


def updates(log):
    return [e["update"] for e in log if e["update"]]


TABLE = {0: (1, E, 0), 1: (1, S | R, 0), 2: (1, N, 0), 3: (1, W | E | N, 0),
         4: (0, E, 0),                  # does not accept this port
         5: (1, 0, 0)}                  # no output


@pytest.mark.parametrize("arrival, cfg_route", [
    (word(4, 1), (1, 0)),                                              # port not in rx
    (word(5, 1), (1, 0)),                                              # no tx
    (word(7, 1), (1, 0)),                                              # no route at all
    (control(5, ControlOp.ADVANCE), (1, 0)),                           # a switch command too
    (word(CFG, config_switch(8, ControlOp.RESET)), (1, 0)),            # target >= n_colors
    (word(CFG, int(CONFIG.pack(op=2, target=1))), (1, 0)),             # unknown op
    (word(CFG, int(CONFIG.pack(op=3, target=1))), (1, 0)),             # unknown op
    (word(CFG, config_switch(1, ControlOp.RESET)), (0, E)),            # port not in cfg rx
    (word(CFG, config_switch(1, ControlOp.RESET, hops=2)), (1, 0)),    # to forward, no cfg tx
], ids=["not in rx", "no tx", "no route", "switch command", "cfg target", "cfg op 2",
        "cfg op 3", "cfg not in rx", "cfg forward no tx"])
def test_input_drops_and_counts(arrival, cfg_route):
    bench = InputBench(table=TABLE, cfg_route=cfg_route)
    log = bench.run([arrival, word(0, 2)], 8)
    assert log[0]["taken"] == arrival and log[1]["taken"] == word(0, 2)
    assert [e["drops"] for e in log] == [1] + [0] * 7
    assert not updates(log) and not any(e["update_valid"] for e in log)
    assert [(offer, request) for _, offer, request, _ in requested(log)] == [(word(0, 2), E)]


def test_input_ready_never_follows_the_route_lookup():
    """A wavelet to drop waits for room in its queue like any other (``i.ready`` follows from
    the queue's level, not the lookup), and is dropped when taken; a configuration for this
    router needs no room and is taken at once. So the port before needs no skid buffer."""
    bench = InputBench(table=TABLE, n_queues=1, depth=2)
    consumed = word(CFG, config_switch(1, ControlOp.RESET))
    arrivals = [word(0, 1), word(0, 2), consumed, word(4, 3), word(0, 4)]
    log = bench.run(arrivals, 14, served=lambda cycle, request, offer: request * (cycle >= 8))
    taken = {e["taken"]: e["cycle"] for e in log if e["taken"] is not None}
    # the queue is full from cycle 2: the configuration is taken then, the wavelet to drop
    # (its port is not in its color's rx) only once the head leaves in cycle 8
    assert [taken[w] for w in arrivals] == [0, 1, 2, 9, 10]
    assert [e["cycle"] for e in log if e["drops"]] == [9]
    assert requested(log)[:2] == [(c, word(0, 1), E, 0) for c in (1, 2)]
    assert updates(log) and sum(e["drops"] for e in log) == 1


def test_input_takes_nothing_while_disabled():
    bench = InputBench(table=TABLE)
    dut = bench.dut

    async def bench_fn(ctx):
        ctx.set(dut.i.valid, 1)
        ctx.set(dut.i.payload.as_value(), word(0, 1))
        ctx.set(dut.arrive.route, bench.route(0))
        for _ in range(3):
            assert not ctx.get(dut.i.ready)
            await ctx.tick()
        assert ctx.get(dut.empty)
        ctx.set(dut.enable, 1)
        assert ctx.get(dut.i.ready)

    simulate(dut, bench_fn)


@pytest.mark.parametrize("data, expected", [
    (config_write(3, 1, "NW", "ES", last=2),
     {"write": 1, "color": 3, "position": 1, "last": 2, "rx": N | W, "tx": E | S}),
    (config_switch(6, ControlOp.TEARDOWN), {"write": 0, "color": 6, "cmd": ControlOp.TEARDOWN}),
    (config_switch(0, ControlOp.ADVANCE), {"write": 0, "color": 0, "cmd": ControlOp.ADVANCE}),
], ids=["write", "teardown", "advance"])
def test_input_consumes_its_configuration_into_an_update(data, expected):
    bench = InputBench(table=TABLE, cfg_route=(1, E | S))
    log = bench.run([word(CFG, data)], 6)
    assert log[0]["taken"] == word(CFG, data) and log[0]["drops"] == 0
    assert [e["cycle"] for e in log if e["update"]] == [1]
    got = updates(log)[0]
    assert {k: got[k] for k in expected} == {k: as_int(v) for k, v in expected.items()}
    assert not requested(log) and all(e["empty"] for e in log)


def test_input_forwards_configuration_with_one_hop_less():
    bench = InputBench(table=TABLE, cfg_route=(1, N | W))
    data = config_write(2, 0, "E", "W", last=0, hops=3)
    log = bench.run([word(CFG, data)], 5)
    forwarded = word(CFG, int(CONFIG.pack(**{**CONFIG.unpack(data), "hops": 2})))
    assert requested(log) == [(1, forwarded, N | W, N | W)]
    assert not updates(log) and sum(e["drops"] for e in log) == 0


def test_input_queues_a_switch_command_and_updates():
    bench = InputBench(table=TABLE)
    command = control(3, ControlOp.TEARDOWN, arg=7)
    log = bench.run([command], 5)
    assert [(u["write"], u["color"], u["cmd"]) for u in updates(log)] == \
        [(0, 3, ControlOp.TEARDOWN.value)]
    assert requested(log) == [(1, command, W | E | N, W | E | N)]
    control_nop = control(3, ControlOp.NOP)
    log = InputBench(table=TABLE).run([control_nop], 4)        # not a switch command: no update
    assert not updates(log) and requested(log) == [(1, control_nop, W | E | N, W | E | N)]


@pytest.mark.parametrize("engine_ready_at", [1, 4])
@pytest.mark.parametrize("first", [word(CFG, config_switch(2, ControlOp.ADVANCE)),
                                   control(0, ControlOp.ADVANCE)], ids=["config", "command"])
def test_input_waits_while_its_update_is_pending_and_one_cycle_after(engine_ready_at, first):
    bench = InputBench(table=TABLE)
    log = bench.run([first, word(2, 1), word(2, 2)], engine_ready_at + 6,
                    update_ready=lambda cycle: cycle >= engine_ready_at)
    assert [e["cycle"] for e in log if e["update"]] == [engine_ready_at]
    assert [e["cycle"] for e in log if e["taken"]] == [0, engine_ready_at + 2,
                                                       engine_ready_at + 3]
    assert [e["ready"] for e in log[1:engine_ready_at + 2]] == [0] * (engine_ready_at + 1)


def run_traffic(seed, *, n_queues, depth, cycles, colors=range(6)):
    """Random multicast traffic with random backpressure; returns the bench, arrivals and log."""
    rng = random.Random(seed)
    table = {c: (1, rng.randrange(1, 32), 0) for c in colors}
    bench = InputBench(table=table, n_queues=n_queues, depth=depth)
    arrivals = [word(rng.choice(colors), k) for k in range(60)]
    log = bench.run(arrivals, cycles, served=lambda c, request, o: request & rng.getrandbits(5),
                    idle=lambda c: rng.random() < 0.7)
    return bench, arrivals, log


@pytest.mark.parametrize("n_queues, depth", [(1, 2), (2, 3), (3, 2)])
def test_input_queues_keep_order_and_multicasts_leave_after_every_copy(n_queues, depth):
    bench, arrivals, log = run_traffic(6, n_queues=n_queues, depth=depth, cycles=600)
    queue = {w: bench.queue_of(fields(w)["color"]) for w in arrivals}
    owed = {w: bench.table[fields(w)["color"]][1] for w in arrivals}
    taken = {e["taken"]: e["cycle"] for e in log if e["taken"]}
    done = []
    for cycle, offer, request, served in requested(log):
        assert taken[offer] < cycle, "offered before it was taken"
        assert request == owed[offer], "requested outputs already served, or not its route"
        earlier = [w for w in arrivals[:arrivals.index(offer)] if queue[w] == queue[offer]]
        assert all(w in done for w in earlier), "offered ahead of its queue"
        owed[offer] &= ~served
        if not owed[offer]:
            done.append(offer)
    assert set(done) == set(arrivals) and len(done) == len(arrivals)
    assert sum(e["drops"] for e in log) == 0 and log[-1]["empty"]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("n_queues, depth, tag_slots", [(2, 2, True), (3, 2, True), (2, 2, False),
                                                        (2, 3, True), (3, 4, True)])
def test_input_tags_follow_their_wavelets_through_every_slot(seed, n_queues, depth, tag_slots):
    """The tags (``tx``, ``torn``) live apart from the wavelets, one LUT RAM per queue slot,
    read by the candidate queue and chosen by its read pointer: under random multicast
    traffic, backpressure and colors torn down until a random cycle, every wavelet must first
    ask for its own route's outputs (a torn one, the route it reopens with), in queue order,
    and leave after every copy."""
    rng = random.Random(100 * seed + 10 * n_queues + depth)
    colors = range(6)
    table = {c: (1, rng.randrange(1, 32), 0) for c in colors}
    torn = rng.sample(colors, 2)
    reopened = {c: (1, rng.randrange(1, 32), 0) for c in torn}
    for c in torn:
        table[c] = (1, rng.randrange(32), 1)
    expected = {c: (reopened[c] if c in torn else table[c])[1] for c in colors}
    at = rng.randrange(20, 120)
    bench = InputBench(table=table, n_queues=n_queues, depth=depth, tag_slots=tag_slots)
    arrivals = [word(rng.choice(colors), k) for k in range(80)]
    events = {at: lambda t: t.update(reopened)}
    log = bench.run(arrivals, 900, events=events,
                    served=lambda c, request, o: request & rng.getrandbits(5),
                    idle=lambda c: rng.random() < 0.6)
    owed, done = {}, []
    for cycle, offer, request, served in requested(log):
        color = fields(offer)["color"]
        if offer not in owed:
            assert request == expected[color], f"cycle {cycle}: not its own route's outputs"
            earlier = [w for w in arrivals[:arrivals.index(offer)]
                       if bench.queue_of(fields(w)["color"]) == bench.queue_of(color)]
            assert all(w in done for w in earlier), "offered ahead of its queue"
            owed[offer] = request
        assert request == owed[offer], "asked again for copies already taken"
        owed[offer] &= ~served
        if not owed[offer]:
            done.append(offer)
    assert sorted(done) == sorted(arrivals) and sum(e["drops"] for e in log) == 0


def test_input_resumes_a_partly_served_multicast_after_a_rotation():
    bench = InputBench(table={0: (1, E | S, 0), 1: (1, N, 0)})
    multicast, unicast = word(0, 1), word(1, 2)       # queues 0 and 1

    unicast_sent = []

    def served(cycle, request, offer):
        if offer == unicast:
            unicast_sent.append(cycle)
            return request
        if request == E | S:
            return E                                  # one copy now,
        return request if unicast_sent else 0         # the other after the other queue's head

    log = bench.run([multicast, unicast], 10, served=served)
    assert [(o, r, s) for _, o, r, s in requested(log)] == [
        (multicast, E | S, E), (multicast, S, 0), (unicast, N, N), (multicast, S, S)]
    assert log[-1]["empty"]


def test_input_blocked_queue_does_not_block_the_other():
    bench = InputBench(table={0: (1, N, 0), 1: (1, E, 0)})
    blocked, others = word(0, 99), [word(1, k) for k in range(5)]
    log = bench.run([blocked, *others], 20, served=lambda c, r, o: 0 if o == blocked else r)
    assert [o for _, o, _, s in requested(log) if s] == others
    assert any(o == blocked for _, o, _, _ in requested(log)[-3:]), "the blocked head left"
    assert not log[-1]["empty"]


def reopen(color, route):
    def event(table):
        table[color] = route
    return event


@pytest.mark.parametrize("reopened, offered", [
    ((1, S, 0), S),
    ((0, S, 0), None),          # no longer accepts this port: dropped
    ((1, 0, 0), None),          # no output: dropped
], ids=["routed", "not in rx", "no tx"])
@pytest.mark.parametrize("torn", [(1, E, 1), (0, 0, 1)], ids=["torn", "torn, no route"])
def test_input_holds_a_torn_color_until_it_reopens(torn, reopened, offered):
    """Torn wins over a drop on arrival: the route is read again once the color reopens."""
    bench = InputBench(table={3: torn, 2: (1, N, 0)})           # color 3 torn; queues 1 and 0
    held, other = word(3, 1), word(2, 2)
    log = bench.run([held, other], 20, events={10: reopen(3, reopened)})
    assert [e["cycle"] for e in log if e["taken"]] == [0, 1]
    # the other queue goes on, once the candidate has spent a cycle looking the torn head up
    assert requested(log)[0][:3] == (3, other, N)
    late = [(c, o, r) for c, o, r, _ in requested(log) if o == held]
    assert all(c >= 10 for c, _, _ in late)
    # The torn head is looked up every other cycle and the answer used in the next.
    if offered is None:
        drops = [e["cycle"] for e in log if e["drops"]]
        assert not late and len(drops) == 1 and 10 <= drops[0] <= 12
    else:
        assert late[0][1:] == (held, S) and 10 <= late[0][0] <= 13
        assert sum(e["drops"] for e in log) == 0
    assert log[-1]["empty"]


def test_input_holds_a_torn_switch_command_until_it_reopens():
    """Queued while its color is torn, a switch command is forwarded once the color reopens,
    by the reopened route, and changes nothing (docs/router.md, "Teardown")."""
    bench = InputBench(table={3: (1, E, 1)})
    command = control(3, ControlOp.ADVANCE)
    log = bench.run([command], 20, events={8: reopen(3, (1, W, 0))})
    assert not any(e["update_valid"] for e in log), "a command held torn made an update"
    assert [(o, r, s) for _, o, r, s in requested(log)] == [(command, W, W)]
    assert 8 <= requested(log)[0][0] <= 11
    assert log[-1]["empty"] and sum(e["drops"] for e in log) == 0


def advance_engine(positions):
    """A color's ADVANCE moves it along ``positions`` (``[(accept, tx)]``), as the route state."""
    current = {}

    def engine(update, table):
        if not update["write"] and update["cmd"] == ControlOp.ADVANCE.value:
            c = update["color"]
            current[c] = (current.get(c, 0) + 1) % len(positions)
            table[c] = (*positions[current[c]], 0)
    return engine


def test_input_wavelets_behind_a_held_switch_command_leave_by_the_route_it_leaves():
    """Color 3 is torn when an ADVANCE arrives (held); the color reopens at position 0 (tx E,
    position 1 is tx W); a data wavelet of color 3 arrives after the reopen, behind the held
    command in the same queue. Whatever the held command does to the route, the data wavelet
    must leave by the route the color has after it (docs/router.md: "a switch command affects
    exactly the wavelets of that color behind it")."""
    bench = InputBench(table={3: (1, E, 1)}, n_queues=1)
    command, behind = control(3, ControlOp.ADVANCE), word(3, 5)
    log = bench.run([command, behind], 24, events={4: reopen(3, (1, E, 0))},
                    idle=lambda cycle: cycle == 0 or cycle >= 4,
                    engine=advance_engine([(1, E), (1, W)]))
    assert [e["cycle"] for e in log if e["taken"]][1] == 4      # after the reopen, before the
    assert requested(log)[0][0] > 4                              # held command is looked up
    final_tx = bench.table[3][1]
    assert [(o, r) for _, o, r, _ in requested(log) if o == behind] == [(behind, final_tx)]


def test_input_without_u_turns_never_sends_back_out_of_its_port():
    table = {0: (1, E | S, 0), 1: (1, E, 0), 2: (1, E | N, 1)}
    bench = InputBench(table=table, cfg_route=(1, E | W), port=Direction.E, u_turns=False)
    forward = word(CFG, config_switch(0, ControlOp.RESET, hops=1))
    log = bench.run([word(0, 1), word(1, 2), forward, word(2, 3)], 20,
                    events={10: reopen(2, (1, E | N, 0))})
    assert [e["cycle"] for e in log if e["drops"]] == [1]        # E only: nothing left
    assert [(o, r) for _, o, r, _ in requested(log)] == [
        (word(0, 1), S),
        (word(CFG, config_switch(0, ControlOp.RESET, hops=0)), W),
        (word(2, 3), N)]


def test_input_without_u_turns_needs_its_port():
    with pytest.raises(ValueError, match="^an input without U-turns needs its port$"):
        RouterInput(n_queues=1, depth=2, n_colors=8, cfg_color=CFG, u_turns=False)
