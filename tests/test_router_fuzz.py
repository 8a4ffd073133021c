"""The router's fuzz with reconfiguration mid-traffic: the timed reference model's rules on
hand-made timings, the checker on corrupted outputs, a short fuzz on the compiled harness, and
the seeded bugs it catches. The 10-million-wavelet run is under ``slow`` (``make regress``)."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from wse.bench.router import fuzz_failures
from wse.bench.router_fuzz import fuzz_router
from wse.bench.router_fuzz_model import Expected, TimedRouterModel, check_outputs
from wse.host.cli import main
from wse.rtl.wavelet import CONFIG, WAVELET, ConfigOp, Direction
from wse.sim import router_run

N, E, S, W, R = (d.value for d in Direction)
CFG = 31
#: The tests that run the harness share one worker: one Verilog export, one build.
HARNESS = pytest.mark.xdist_group("router_fuzz")


def _data(uid, color):
    return int(WAVELET.pack(data=uid, color=color))


def _write(target, tx):
    return int(WAVELET.pack(data=CONFIG.pack(op=ConfigOp.WRITE_ROUTE.value, target=target,
                                             hops=0, position=0, last=0, rx=0b11111, tx=tx),
                            color=CFG))


def _outputs(expected, word):
    return [o for o in range(5) if word in expected.words[o]]


def test_update_is_seen_two_cycles_after_its_grant():
    """A rewrite taken on W in cycle 10 is granted in 11 and seen from 13: N's wavelets of that
    color taken in 11 and 12 keep the old route (E), those taken in 13 and 14 take the new (N)."""
    model = TimedRouterModel(router_run.testbench_router())
    streams = [[_data(k, 0) for k in (1, 2, 3, 4)], [], [], [_write(0, 0b00001)], []]
    taken = [[11, 12, 13, 14], [], [], [10], []]
    expected = model.batch(streams, taken)
    assert [_outputs(expected, _data(k, 0)) for k in (1, 2, 3, 4)] == [[E], [E], [N], [N]]
    assert expected.drops == 0 and model.counts["route_writes"] == 1


def test_updates_are_granted_round_robin():
    """E and S take rewrites in the same cycle; the engine last granted W, so E goes first (seen
    from 23) and S a cycle later (seen from 24)."""
    model = TimedRouterModel(router_run.testbench_router())
    model.batch([[], [], [], [_write(5, 0b00010)], []], [[], [], [], [0], []])  # W granted
    streams = [[], [_write(1, 0b01000)], [_write(2, 0b01000)], [],
               [_data(10, 1), _data(11, 2), _data(12, 2)]]
    taken = [[], [20], [20], [], [23, 23, 24]]
    expected = model.batch(streams, taken)
    assert _outputs(expected, _data(10, 1)) == [W]
    assert _outputs(expected, _data(11, 2)) == [N, R]          # the elaborated route
    assert _outputs(expected, _data(12, 2)) == [W]


def _expected(words, groups):
    words = [np.array(w, dtype=np.uint64) for w in words]
    groups = [np.array(g, dtype=np.int64) for g in groups]
    seqs = [np.arange(len(w)) for w in words]
    return Expected(words, groups, seqs, drops=0)


@pytest.mark.parametrize("delivered, counts", [
    ([[1, 2, 3], [7]], {"lost": 0, "reordered": 0, "unexpected": 0}),
    ([[1, 3], [7]], {"lost": 1, "reordered": 0, "unexpected": 0}),
    ([[2, 1, 3], [7]], {"lost": 0, "reordered": 1, "unexpected": 0}),
    ([[1, 2, 2, 3], [7]], {"lost": 0, "reordered": 0, "unexpected": 1}),
    ([[1, 2, 3], [7, 9]], {"lost": 0, "reordered": 0, "unexpected": 1}),
    ([[1, 2, 3], []], {"lost": 1, "reordered": 0, "unexpected": 0}),
])
def test_checker_counts(delivered, counts):
    expected = _expected([[1, 2, 3], [7], [], [], []], [[0, 0, 0], [0], [], [], []])
    result = check_outputs(expected, [np.array(d, dtype=np.uint64) for d in delivered]
                           + [np.zeros(0, dtype=np.uint64)] * 3)
    assert {key: result[key] for key in counts} == counts


def test_checker_keeps_order_per_input_and_color_only():
    """Copies of different (input, color) groups may interleave in any order."""
    expected = _expected([[1, 2, 3, 4], [], [], [], []], [[0, 0, 1, 1], [], [], [], []])
    result = check_outputs(expected, [np.array([3, 1, 4, 2], dtype=np.uint64)]
                           + [np.zeros(0, dtype=np.uint64)] * 4)
    assert result["reordered"] == 0 and result["delivered"] == 4


@HARNESS
def test_short_fuzz_is_clean(figure):
    """A short reconfiguring fuzz on the compiled harness (a minute to build the first time)."""
    figures = fuzz_router(40_000, seed=7)
    figure(f"router fuzz with reconfiguration: {figures['wavelets']} wavelets, "
           f"{figures['reconfigurations']} reconfigurations, {figures['teardowns']} teardowns, "
           f"{figures['lost']} lost, {figures['reordered']} reordered, "
           f"{figures['unexpected']} unexpected, drops {figures['drops_counted']}/"
           f"{figures['drops_expected']}, {figures['wall_seconds']} s")
    assert fuzz_failures(figures) == "", figures
    assert figures["delivered"] == figures["copies"] > figures["wavelets"]
    for key in ("reconfigurations", "route_writes", "advances", "resets", "teardowns",
                "reopened", "torn_wavelets", "raced_wavelets", "forwarded_configs",
                "bad_configs", "drops_expected"):
        assert figures[key] > 0, (key, figures)


@HARNESS
def test_command():
    """``wse bench router --reconfigure``: the figures as JSON; Icarus refused in one line."""
    result = CliRunner().invoke(main, ["bench", "router", "--reconfigure", "--fuzz", "3000",
                                       "--seed", "2", "--json"])
    assert result.exit_code == 0, result.output
    figures = json.loads(result.output)
    assert figures["wavelets"] >= 3000 and figures["lost"] == 0 and figures["reconfigurations"]
    result = CliRunner().invoke(main, ["bench", "router", "--reconfigure", "--sim", "icarus"])
    assert result.exit_code == 2 and "runs on Verilator's compiled harness" in result.output


def _drop_one(delivered):
    return [delivered[0][1:], *delivered[1:]]


def _reversed(delivered):
    return [delivered[0], delivered[1][::-1].copy(), *delivered[2:]]


def _twice(delivered):
    return [np.concatenate([delivered[2], delivered[2][-1:]]), *delivered[:2], *delivered[3:]]


@HARNESS
@pytest.mark.parametrize("mutation, expect", [
    ({"visible_after": 1}, ("lost", "unexpected")),
    ({"visible_after": 3}, ("lost", "unexpected")),
    ({"corrupt": _drop_one}, ("lost",)),
    ({"corrupt": _twice}, ("unexpected",)),
])
def test_fuzz_catches_seeded_bugs(mutation, expect):
    """A reference rule off by a cycle either way, an output word lost, one delivered twice:
    each fails the fuzz."""
    figures = fuzz_router(20_000, seed=3, **mutation)
    assert all(figures[key] > 0 for key in expect), figures
    assert fuzz_failures(figures) != ""


@HARNESS
def test_fuzz_catches_reordering():
    """One output's words delivered backwards: reordered, nothing lost or unexpected."""
    figures = fuzz_router(20_000, seed=4, corrupt=_reversed)
    assert figures["reordered"] > 0 and figures["lost"] == figures["unexpected"] == 0, figures


#: Bugs seeded in the RTL (a copy of the module, the files untouched), each built on its own.
RTL_MUTATIONS = {
    "input_takes_before_its_update_is_seen": (
        "router_input", "RouterInput", "lock.eq(slot_valid | applying)", "lock.eq(slot_valid)"),
    "advance_does_not_wrap": (
        "route_state", "RouteState",
        "new.current.eq(Mux(was.current >= was.last, 0, was.current + 1))",
        "new.current.eq(was.current + 1)"),
    "reopened_head_keeps_its_old_route": (
        "router_input", "RouterInput", "owed_next = Mux(resumed, again.tx, left)",
        "owed_next = Mux(resumed, head.tag.tx, left)"),
}


@HARNESS
@pytest.mark.slow
@pytest.mark.parametrize("name", list(RTL_MUTATIONS))
def test_fuzz_catches_rtl_mutations(name):
    """Each seeded RTL bug fails a short fuzz (about a minute each to build)."""
    from tests.formal.sby import mutant

    module, part, old, new = RTL_MUTATIONS[name]
    mutated = mutant(module, {old: new})
    router = mutant("router", {}, **{part: getattr(mutated, part)}).Router
    figures = fuzz_router(40_000, seed=7,
                          router=router.from_params(router_run.testbench_router().params()))
    assert fuzz_failures(figures) != "", figures


@HARNESS
@pytest.mark.slow
def test_ten_million_wavelets():
    """The full run (about five minutes on two cores): nothing lost, reordered or unexpected,
    drops as expected, thousands of reconfigurations and teardowns."""
    figures = fuzz_router(10_000_000, seed=1)
    assert fuzz_failures(figures) == "", figures
    assert figures["reconfigurations"] > 1000 and figures["teardowns"] > 1000, figures
