"""The router's cocotb testbench (tb/router_tests.py) on Verilator and Icarus.

Each simulator's tests share one build and run on one pytest-xdist worker (``xdist_group``);
every test is one simulator run, checked against the reference model and scoreboard. The
figures each run logs (copies delivered, cycles, drops, hop latency) appear at the end.
"""

import pytest

from wse.sim.router_run import run_router_tests

from .cocotb_checks import SIMS, SIMS_ICARUS_SLOW, check

TESTS = ["every_direction", "multicast", "switch_positions", "fair_share", "teardown",
         "runtime_reconfiguration", "drops", "elaborated_routes", "random_traffic_fuzz",
         "watchdog_names_stuck_port"]


@pytest.mark.parametrize("testcase", [t for t in TESTS if t != "random_traffic_fuzz"])
@pytest.mark.parametrize("sim", SIMS)
def test_router(sim, testcase, figure):
    check(run_router_tests(sim=sim, testcase=testcase), figure, sim)


@pytest.mark.parametrize("sim", SIMS_ICARUS_SLOW)
def test_router_random_traffic_fuzz(sim, figure):
    check(run_router_tests(sim=sim, testcase="random_traffic_fuzz"), figure, sim)


@pytest.mark.parametrize("sim", SIMS_ICARUS_SLOW)
def test_router_single_queue_depth_2(sim, figure):
    """The smallest configuration: one queue per port, two entries; fuzz and every path."""
    result = run_router_tests(sim=sim, n_queues=1, depth=2, module="wse.tb.router_tests",
                              testcase="random_traffic_fuzz", seed=2)
    check(result, figure, f"{sim} q1d2")


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(1, 9))
@pytest.mark.parametrize("sim", SIMS)
def test_router_long_fuzz(sim, seed, figure):
    """Long random traffic (20000 wavelets per pacing), several seeds."""
    check(run_router_tests(sim=sim, testcase="random_traffic_fuzz", seed=seed, fuzz=20000),
          figure, f"{sim} seed {seed}")
