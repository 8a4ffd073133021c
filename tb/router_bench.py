"""cocotb module that measures the router: throughput, hop latency, and a long fuzz.

Run by ``wse bench router`` (through :mod:`bench.router`). Writes its figures as JSON to the
path in ``WSE_BENCH_OUT`` before it checks them, so a failing run still reports what it saw.
"""

import itertools
import json
import os
import random

import cocotb

from wse.rtl.route_table import RouteTable
from wse.rtl.wavelet import WAVELET, Direction

from .router_stimulus import random_traffic
from .router_tb import RouterTB, load_params
from .router_tests import pacing
from .scoreboard import Scoreboard

#: Each input's traffic goes to a different output: all five outputs can run at full rate.
PERMUTATION = {Direction.N: Direction.S, Direction.S: Direction.N, Direction.E: Direction.W,
               Direction.W: Direction.E, Direction.R: Direction.R}


async def throughput(tb, count):
    """All five outputs saturated (a permutation at full rate, no backpressure).

    Returns wavelets per cycle for each output, from its first transfer to its last.
    """
    await tb.program(RouteTable(tb.n_colors, {src.value: (src.name, [dst])
                                              for src, dst in PERMUTATION.items()}))
    uid = itertools.count(1)
    marks = {d: len(tb.arrivals[d]) for d in Direction}
    await tb.phase({src: [int(WAVELET.pack(data=next(uid), color=src.value))
                          for _ in range(count)] for src in Direction})
    assert tb.scoreboard.clean, tb.scoreboard.summary()
    rates = {}
    for d in Direction:
        cycles = [cycle for cycle, _ in tb.arrivals[d][marks[d]:]]
        rates[d.name] = len(cycles) / (cycles[-1] - cycles[0] + 1)
    return rates


async def hop_latency(tb):
    """One wavelet at a time, every input to every output, on an idle router."""
    await tb.program(RouteTable(tb.n_colors, {d.value: ("NESWR", [d]) for d in Direction}))
    uid = itertools.count(1)
    start = len(tb.latencies)
    for src in Direction:
        for dst in Direction:
            await tb.phase({src: [int(WAVELET.pack(data=next(uid), color=dst.value))]})
    assert tb.scoreboard.clean, tb.scoreboard.summary()
    return tb.latencies[start:]


async def fuzz(tb, count, seed, figures):
    """Random routes, multicast, switch commands, drops; random idle and backpressure.

    Fills ``figures`` whether the phase passes or fails (a watchdog or scoreboard failure is
    re-raised after the counts are recorded), so a failing run still reports what was lost.
    """
    tb.pace(*pacing("random", seed))
    traffic = random_traffic(seed, count, n_colors=tb.n_colors)
    await tb.program(traffic.table)
    tb.scoreboard = board = Scoreboard()
    drops_before, model_before, cycle_before = tb.drops(), tb.model.drops, tb.cycle
    try:
        await tb.phase(traffic.streams)
    finally:
        figures.update({
            "fuzz_wavelets": traffic.count, "fuzz_copies": board.expected,
            "fuzz_delivered": board.matched, "fuzz_lost": board.lost,
            "fuzz_reordered": board.reordered, "fuzz_unexpected": board.unexpected,
            "fuzz_cycles": tb.cycle - cycle_before,
            "drops_counted": tb.drops() - drops_before,
            "drops_expected": tb.model.drops - model_before})


@cocotb.test()
async def router_figures(dut):
    params = load_params()
    figures = {}
    out = os.environ["WSE_BENCH_OUT"]

    def save():
        with open(out, "w") as file:
            json.dump(figures, file, indent=2)

    tb = RouterTB(dut, params)
    await tb.start()
    rates = await throughput(tb, int(params.get("throughput_count", 2000)))
    figures["throughput_per_port"] = min(rates.values())
    figures["throughput_by_port"] = rates
    latencies = await hop_latency(tb)
    figures["hop_latency_cycles"] = max(latencies)
    figures["hop_latency_min_cycles"] = min(latencies)
    save()
    try:
        await fuzz(tb, int(params.get("fuzz", 100_000)), int(params.get("seed", 1)), figures)
    finally:
        save()
    assert figures["fuzz_lost"] == figures["fuzz_reordered"] == figures["fuzz_unexpected"] == 0
    assert figures["drops_counted"] == figures["drops_expected"]


@cocotb.test()
async def uniform_load(dut):
    """Every input saturated with wavelets to uniformly random outputs (color = output port).

    Writes ``uniform_throughput_per_port``: wavelets delivered per cycle per output, averaged
    over the five outputs, from the first to the last delivery. Head-of-line blocking keeps it
    below 1; more queues (colors spread over them) and depth raise it.
    """
    params = load_params()
    count = int(params.get("fuzz", 4000))
    rng = random.Random(params.get("seed", 1))
    tb = RouterTB(dut, params)
    await tb.start()
    await tb.program(RouteTable(tb.n_colors, {d.value: ("NESWR", [d]) for d in Direction}))
    uid = itertools.count(1)
    marks = {d: len(tb.arrivals[d]) for d in Direction}
    await tb.phase({src: [int(WAVELET.pack(data=next(uid), color=rng.randrange(5)))
                          for _ in range(count)] for src in Direction})
    cycles = [c for d in Direction for c, _ in tb.arrivals[d][marks[d]:]]
    delivered = len(cycles)
    figures = {"uniform_wavelets": delivered,
               "uniform_cycles": max(cycles) - min(cycles) + 1,
               "uniform_throughput_per_port": delivered / (5 * (max(cycles) - min(cycles) + 1))}
    with open(os.environ["WSE_BENCH_OUT"], "w") as file:
        json.dump(figures, file)
    assert tb.scoreboard.clean, tb.scoreboard.summary()
