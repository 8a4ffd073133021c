"""The router in Amaranth's simulator: parameters, latency, throughput, small traffic."""

import random

import numpy as np
import pytest
from amaranth.sim import Simulator

from wse.rtl.route_table import RouteTable
from wse.rtl.router import Router
from wse.rtl.wavelet import WAVELET, Direction
from wse.tb.router_model import RouterModel
from wse.tb.scoreboard import Scoreboard


def run_router(router, streams, *, cycles, ready=lambda d, cycle: True, idle=lambda d, c: True,
               ramp_accept=None):
    """Drive ``{Direction: [words]}`` into ``router``; returns (received, drops, accepted).

    ``received[d]`` lists ``(cycle, word)``; ``accepted`` maps each word to its input cycle.
    With ``ramp_accept(color, cycle)`` (a ``Router(ramp_accept=True)``), each input's
    ``ramp_accept`` bit is that function of the color its head offers (``ramp_offer``).
    """
    received = {d: [] for d in Direction}
    accepted = {}
    result = {}

    async def bench(ctx):
        queues = {d: list(streams.get(d, [])) for d in Direction}
        for cycle in range(cycles):
            for d in Direction:
                inp, out = router.port_in(d), router.port_out(d)
                offer = bool(queues[d]) and idle(d, cycle)
                ctx.set(inp.valid, offer)
                if offer:
                    ctx.set(inp.payload.as_value(), queues[d][0])
                ctx.set(out.ready, ready(d, cycle))
            if ramp_accept is not None:
                ctx.set(router.ramp_accept,
                        sum(ramp_accept(ctx.get(router.ramp_offer[d]), cycle) << d
                            for d in Direction))
            for d in Direction:
                inp, out = router.port_in(d), router.port_out(d)
                if ctx.get(inp.valid) and ctx.get(inp.ready):
                    accepted[queues[d].pop(0)] = cycle
                if ctx.get(out.valid) and ctx.get(out.ready):
                    received[d].append((cycle, ctx.get(out.payload.as_value())))
            await ctx.tick()
        result["drops"] = ctx.get(router.drops)
        result["error"] = ctx.get(router.error)

    sim = Simulator(router)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return received, result, accepted


def words(color, ids):
    return [int(WAVELET.pack(data=i, color=color)) for i in ids]


@pytest.mark.parametrize("kwargs, message", [
    ({"n_colors": 33}, r"^n_colors must be an integer in 1\.\.32, not 33$"),
    ({"cfg_color": 5}, r"^cfg_color must be None or a color in 24\.\.\.31 \(not routable\), "
                       r"not 5$"),
    ({"n_queues": 0}, r"^n_queues must be an integer in 1\.\.8, not 0$"),
    ({"depth": 1}, r"^depth must be an integer of at least 2, not 1$"),
    ({"queue_map": [0] * 31}, r"^queue_map must give a queue in 0\.\.1 for each of the 32 colors"),
    ({"queue_map": [2] * 32}, r"^queue_map must give a queue in 0\.\.1 for each of the 32 colors"),
    ({"routes": RouteTable(8)}, r"^Route table is for 8 colors, not 24$"),
    ({"counter_width": 0}, r"^counter_width must be an integer in 1\.\.64, not 0$"),
    ({"n_colors": 32, "cfg_color": 31}, r"^cfg_color must be None when all 32 colors are "
                                        r"routable, not 31$"),
    ({"routes": [(0, 1)]}, r"^routes must be a RouteTable or a dict of color to positions"),
    ({"cfg_route": "NESWR"}, r"^cfg_route must be a Position or an \(rx, tx\) pair, "
                             r"not 'NESWR'$"),
])
def test_parameters_are_checked(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Router(**kwargs)


def test_all_32_colors_without_configuration():
    router = Router(n_colors=32, cfg_color=None)
    assert router.params()["cfg_color"] is None


def test_params_round_trip():
    router = Router(routes={1: [("W", "E"), ("N", "S")]}, n_queues=3, depth=3)
    again = Router.from_params(router.params())
    assert again.params() == router.params()


def test_two_cycles_per_hop_and_one_wavelet_per_cycle():
    """A wavelet taken at an edge is in its output register two edges later (docs/router.md:
    the output register is the second cycle); the first 24 cycles load the route tables."""
    router = Router(routes={0: ("W", "E")}, n_queues=1, depth=2)
    received, result, accepted = run_router(router, {Direction.W: words(0, range(1, 41))},
                                            cycles=24 + 45)
    cycles = [c for c, _ in received[Direction.E]]
    assert [w for _, w in received[Direction.E]] == words(0, range(1, 41))
    assert cycles == list(range(cycles[0], cycles[0] + 40)), "not one wavelet per cycle"
    latencies = {cycle - accepted[w] for cycle, w in received[Direction.E]}
    assert latencies == {2}
    assert result["drops"] == 0 and result["error"] == 0


def test_small_random_traffic_matches_the_model():
    rng = random.Random(3)
    table = RouteTable(24, {c: ("NESWR", rng.randrange(1, 32)) for c in range(12)})
    table[12] = ("W", "E")                        # refuses every other input
    router = Router(routes=table)
    model = RouterModel(routes=table, cfg_route=router.cfg_route, n_queues=router.n_queues,
                        depth=router.depth)
    streams = {d: [int(WAVELET.pack(data=100 * d.value + i, color=rng.randrange(0, 14)))
                   for i in range(30)] for d in Direction}
    scoreboard = Scoreboard()
    fates = model.phase(streams)
    for d in Direction:
        for fate in fates[d]:
            for out, word in fate.outputs:
                scoreboard.expect(out.name, (d.name, word >> 32), word)
    received, result, _ = run_router(
        router, streams, cycles=400,
        ready=lambda d, c: (c + d.value) % 3 != 0, idle=lambda d, c: (c * 7 + d.value) % 4 != 0)
    for d in Direction:
        for _, word in received[d]:
            scoreboard.receive(d.name, word)
    assert scoreboard.clean, scoreboard.summary() + "; ".join(scoreboard.errors)
    assert result["drops"] == model.drops > 0
    assert result["error"] == 1


def test_drop_counter_saturates():
    router = Router(routes={}, counter_width=2)
    _, result, _ = run_router(router, {Direction.W: words(1, range(10))}, cycles=24 + 20)
    assert result["drops"] == 3 and result["error"] == 1


@pytest.mark.parametrize("seed", range(3))
def test_ramp_grants_only_heads_the_core_accepts(seed):
    """``Router(ramp_accept=True)`` shows each input's head color and asks per input: the ramp
    grants a head only in a cycle in which the answer for that input is yes. Four inputs offer
    four colors to the ramp at once and the answers are random per color and cycle (color 3,
    E's, always no), so a router that gave an input another input's answer grants a word in a
    refused cycle, or E's word at all."""
    table = RouteTable(24, {1: ("N", "R"), 2: ("W", "R"), 3: ("E", "R"), 4: ("S", "R")})
    router = Router(routes=table, n_queues=1, depth=2, ramp_accept=True)
    yes = np.random.default_rng(seed).random((32, 200)) < 0.4
    yes[3] = False

    def accept(color, cycle):
        return bool(yes[color, cycle])

    streams = {Direction.N: words(1, range(10)), Direction.W: words(2, range(10, 20)),
               Direction.E: words(3, range(20, 30)), Direction.S: words(4, range(30, 40))}
    received, result, _ = run_router(router, streams, cycles=24 + 150, ramp_accept=accept)
    ramp = received[Direction.R]
    for color, d in ((1, Direction.N), (2, Direction.W), (4, Direction.S)):
        assert [w for _, w in ramp if w >> 32 == color] == streams[d]
    # granted in the cycle before it is in the ramp's output register
    assert all(accept(w >> 32, cycle - 1) for cycle, w in ramp), "granted a refused head"
    assert not [w for _, w in ramp if w >> 32 == 3], "granted color 3, always refused"
    assert result["drops"] == 0
