"""cocotb tests of the fabric router, each checked against the reference model.

Run through ``tests/test_router_cocotb.py`` (pytest) or ``wse sim router``. Parameters arrive in
``WSE_PARAMS`` (the router's own, plus ``seed`` and ``fuzz`` for the random test). Every test
paces its ports with idle and backpressure inserters and ends with the scoreboard clean and the
drop counter equal to the model's.
"""

import itertools
import os

import cocotb

from wse.rtl.route_table import RouteTable, config_switch, config_write
from wse.rtl.wavelet import CONFIG, CONTROL, WAVELET, ConfigOp, ControlOp, Direction

from .router_stimulus import random_traffic
from .router_tb import RouterStuck, RouterTB, config_word, data_words, load_params
from .streams import always, bursty, random_pattern

ALL = "NESWR"
PACES = ["full", "bursty", "random"]


def pacing(pace, seed=0):
    """``(idle, backpressure)`` factories for :class:`RouterTB` by name."""
    if pace == "full":
        return None, None
    if pace == "bursty":
        return (lambda d: bursty((1, 1, 1, 0)[d:] + (1, 1, 1, 0)[:d]),
                lambda d: bursty((1, 1, 0, 1, 0)[d:] + (1, 1, 0, 1, 0)[:d]))
    return (lambda d: random_pattern(seed * 10 + d, on=0.7),
            lambda d: random_pattern(seed * 10 + 5 + d, on=0.5))


async def start(dut, pace="full", **kwargs):
    params = load_params()
    idle, backpressure = pacing(pace, params.get("seed", 0))
    tb = RouterTB(dut, params, idle=idle, backpressure=backpressure, **kwargs)
    await tb.start()
    return tb


def finish(tb, name):
    """Every test's end: the scoreboard clean, the counters as modelled, the figures logged."""
    assert tb.scoreboard.clean, f"{tb.scoreboard.summary()}: {'; '.join(tb.scoreboard.errors)}"
    tb.check_counters()
    cocotb.log.info("%s: %s; %d cycles, %d drops, hop latency min %s max %s", name,
                    tb.scoreboard.summary(), tb.cycle, tb.drops(),
                    min(tb.latencies, default="-"), max(tb.latencies, default="-"))


@cocotb.test()
@cocotb.parametrize(pace=PACES)
async def every_direction(dut, pace):
    """Every input reaches every output (color = output port); 2-cycle hops when unpaced (the
    second cycle is the output register)."""
    tb = await start(dut, pace)
    table = RouteTable(tb.n_colors, {d.value: (ALL, [d]) for d in Direction})
    await tb.program(table)
    uid = itertools.count(1)
    streams = {src: [int(WAVELET.pack(data=next(uid), color=dst.value))
                     for _ in range(4) for dst in Direction] for src in Direction}
    await tb.phase(streams)
    assert tb.scoreboard.matched == 5 * 5 * 4
    if pace == "full":
        assert set(tb.latencies) and min(tb.latencies) == 2, tb.latencies
    finish(tb, f"every_direction[{pace}]")


@cocotb.test()
@cocotb.parametrize(pace=PACES)
async def multicast(dut, pace):
    """Every multicast mask of 2..5 outputs, from every input: each copy exactly once."""
    tb = await start(dut, pace)
    masks = [m for m in range(1, 32) if bin(m).count("1") >= 2]
    uid = itertools.count(1)
    for chunk in (masks[:13], masks[13:]):
        table = RouteTable(tb.n_colors, {color: (ALL, mask) for color, mask in enumerate(chunk)})
        await tb.program(table)
        streams = {src: [int(WAVELET.pack(data=next(uid), color=color))
                         for color in range(len(chunk)) for _ in range(2)]
                   for src in Direction}
        await tb.phase(streams)
    assert tb.scoreboard.matched == sum(bin(m).count("1") for m in masks) * 2 * 5
    finish(tb, f"multicast[{pace}]")


@cocotb.test()
@cocotb.parametrize(pace=PACES)
async def switch_positions(dut, pace):
    """ADVANCE walks a color through its positions (wrapping), RESET returns to the first."""
    tb = await start(dut, pace)
    color = 7
    table = RouteTable(tb.n_colors, {color: [("W", "E"), ("W", "NS"), ("W", "R")]})
    await tb.program(table)
    uid = itertools.count(1)

    def ctrl(op):
        return int(WAVELET.pack(data=CONTROL.pack(op=op, arg=next(uid)), color=color, ctrl=1))

    def data(n):
        return data_words(color, [next(uid) for _ in range(n)])

    words = (data(2) + [ctrl(ControlOp.ADVANCE)] + data(2) + [ctrl(ControlOp.ADVANCE)]
             + data(2) + [ctrl(ControlOp.ADVANCE)] + data(2) + [ctrl(ControlOp.ADVANCE)]
             + data(1) + [ctrl(ControlOp.RESET)] + data(2) + [ctrl(ControlOp.NOP)] + data(1))
    fates = await tb.phase({Direction.W: words})
    seen = [tuple(d.name for d, _ in f.outputs) for f in fates[Direction.W]]
    assert ("N", "S") in seen and ("R",) in seen and ("E",) in seen, seen
    finish(tb, f"switch_positions[{pace}]")


@cocotb.test()
async def fair_share(dut):
    """Five inputs saturating one output each get a fifth of it (round-robin, no starvation)."""
    tb = await start(dut, "full")
    await tb.program(RouteTable(tb.n_colors, {c: (ALL, "E") for c in range(5)}))
    await tb.phase({src: data_words(src.value, [src.value * 1000 + i for i in range(60)])
                    for src in Direction})     # data: the source's tag, then a sequence number
    window = [int(WAVELET.unpack(w)["data"]) // 1000 for _, w in tb.arrivals[Direction.E][:250]]
    shares = {src: window.count(src.value) for src in Direction}
    cocotb.log.info("fair_share: output E served %s in its first 250 transfers", shares)
    assert all(45 <= n <= 55 for n in shares.values()), shares
    finish(tb, "fair_share")


@cocotb.test()
@cocotb.parametrize(reset_from=["R", "W"])
async def teardown(dut, reset_from):
    """TEARDOWN holds a color, and what queues behind it, until a configuration RESET (sent
    from the host port or down the blocked input itself, past the held data)."""
    tb = await start(dut, "random")
    color = 3
    neighbour = next(c for c in range(tb.n_colors)
                     if c != color and tb.model.queue_of(c) == tb.model.queue_of(color))
    await tb.program(RouteTable(tb.n_colors, {color: ("W", "E"), neighbour: ("W", "S")}))
    before = data_words(color, [1, 2])
    stop = [int(WAVELET.pack(data=CONTROL.pack(op=ControlOp.TEARDOWN, arg=3), color=color,
                             ctrl=1))]
    held = data_words(color, [4]) + data_words(neighbour, [5]) + data_words(color, [6])
    fates = await tb.phase({Direction.W: before + stop + held})
    assert [f.blocked for f in fates[Direction.W]] == [False] * 3 + [True] * 3
    received = tb.sinks[Direction.E].received
    await tb.idle_cycles(100)
    assert tb.sinks[Direction.E].received == received == 3, "a torn-down color moved"
    assert tb.sinks[Direction.S].received == 0, "a wavelet passed a blocked queue head"
    reset = config_word(tb.cfg_color, config_switch(color, ControlOp.RESET))
    fates = await tb.phase({Direction[reset_from]: [reset]})
    assert len(fates["released"]) == 3
    assert tb.sinks[Direction.E].received == 5 and tb.sinks[Direction.S].received == 1
    finish(tb, f"teardown[reset from {reset_from}]")


@cocotb.test()
@cocotb.parametrize(pace=PACES)
async def runtime_reconfiguration(dut, pace):
    """Routes rewritten by configuration wavelets take effect; configs with hops are forwarded."""
    tb = await start(dut, pace)
    uid = itertools.count(1)
    first = RouteTable(tb.n_colors, {c: (ALL, [Direction(c % 5)]) for c in range(10)})
    second = RouteTable(tb.n_colors, {c: (ALL, [Direction((c + 2) % 5), Direction((c + 3) % 5)])
                                      for c in range(10)})
    for table in (first, second, first):
        await tb.program(table, port=Direction(next(uid) % 5))
        streams = {src: [int(WAVELET.pack(data=next(uid), color=c)) for c in range(10)]
                   for src in Direction}
        fates = await tb.phase(streams)
        for src in Direction:
            for fate in fates[src]:
                color = int(WAVELET.unpack(fate.word)["color"])
                expected = {d for d in Direction.from_mask(table[color][0].tx)}
                assert {d for d, _ in fate.outputs} == expected
    # A configuration for a router further along is forwarded with one hop less.
    far = config_write(5, 0, "W", "E", last=0, hops=2)
    fates = await tb.phase({Direction.W: [config_word(tb.cfg_color, far)]})
    outputs = fates[Direction.W][0].outputs
    if tb.model.cfg_route.tx:
        assert outputs and all(CONFIG.unpack(WAVELET.unpack(w)["data"])["hops"] == 1
                               for _, w in outputs)
    finish(tb, f"runtime_reconfiguration[{pace}]")


@cocotb.test()
async def drops(dut):
    """Unrouted colors, refused ports and bad configurations are dropped and counted."""
    tb = await start(dut, "bursty")
    await tb.program(RouteTable(tb.n_colors, {0: ("W", "E"), 1: ("N", "S")}))
    assert tb.drops() == 0 and tb.error() == 0
    bad_target = config_word(tb.cfg_color, int(CONFIG.pack(op=ConfigOp.WRITE_ROUTE, target=27,
                                                           rx=Direction.W.bit, tx=1)))
    bad_op = config_word(tb.cfg_color, int(CONFIG.pack(op=3, target=20, rx=Direction.W.bit,
                                                       tx=2)))
    streams = {
        Direction.W: data_words(0, [1, 2]) + data_words(1, [3]) + data_words(9, [4])
        + data_words(0, [5]),                                   # 1 refused port, 1 unrouted
        Direction.N: data_words(1, [6]) + data_words(25, [7]),  # color outside the table
        Direction.R: [bad_target, bad_op],       # configuration of color 27, unknown op
    }
    await tb.phase(streams)
    assert tb.model.drops == 5
    assert tb.sinks[Direction.E].received == 3 and tb.sinks[Direction.S].received == 1
    finish(tb, "drops")


@cocotb.test()
async def elaborated_routes(dut):
    """Before any configuration, the router follows the table it was elaborated with."""
    tb = await start(dut, "random")
    routed = [int(c) for c in tb.params.get("routes", {})]
    assert routed, "the design under test was built without an initial table"
    uid = itertools.count(1)
    streams = {src: [int(WAVELET.pack(data=next(uid), color=c)) for c in routed * 3]
               for src in Direction}
    await tb.phase(streams)
    assert tb.scoreboard.matched > 0, "nothing routed by the elaborated table"
    finish(tb, "elaborated_routes")


@cocotb.test()
@cocotb.parametrize(pace=PACES)
async def random_traffic_fuzz(dut, pace):
    """Random multicast routes, switch commands and drops; random idle and backpressure."""
    params = load_params()
    seed, count = params.get("seed", 1), int(os.environ.get("WSE_FUZZ", params.get("fuzz", 3000)))
    tb = await start(dut, pace)
    traffic = random_traffic(seed, count, n_colors=tb.n_colors)
    await tb.program(traffic.table)
    await tb.phase(traffic.streams)
    finish(tb, f"random_traffic_fuzz[{pace}, seed {seed}, {count} wavelets]")


@cocotb.test()
async def watchdog_names_stuck_port(dut):
    """A stalled output fails the phase with a message naming the stuck port and color."""
    tb = RouterTB(dut, load_params(), watchdog=200,
                  backpressure=lambda d: iter(lambda: False, True) if d == Direction.E
                  else always())
    await tb.start()
    await tb.program(RouteTable(tb.n_colors, {5: ("W", "E")}))
    try:
        await tb.phase({Direction.W: data_words(5, range(1, 20))})
    except RouterStuck as stuck:
        message = str(stuck)
    else:
        raise AssertionError("the watchdog did not fire on a stalled output")
    cocotb.log.info("watchdog said: %s", message)
    assert "input W stuck offering color 5" in message, message
    assert "output E still owed 19 wavelet(s) of color 5 from input W" in message, message
