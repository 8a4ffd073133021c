"""The simulation harness: a simulator that hangs is killed and reported, not waited for."""

import pytest

from sim.router_run import run_router_tests


@pytest.mark.xdist_group("verilator")
def test_hung_simulation_is_killed_and_reported():
    result = run_router_tests(sim="verilator", module="tb.selftest", testcase="hang", timeout=15)
    assert not result.passed
    message = result.failures["simulation"]
    assert message.startswith("killed after 15 s of wall-clock time"), message
