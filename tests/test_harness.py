"""The simulation harness: a simulator that hangs is killed and reported, not waited for."""

import pytest

from wse.sim.router_run import run_router_tests


@pytest.mark.slow      # about a minute: two simulators, one left to time out
@pytest.mark.xdist_group("verilator")
def test_a_timeout_kills_only_its_own_simulator():
    """Two simulations in one process (two Systems, say): the one that times out is killed, the
    other keeps running until its own deadline."""
    import threading

    results = {}

    def hang(seed, timeout):
        results[seed] = run_router_tests(sim="verilator", module="wse.tb.selftest", testcase="hang",
                                         seed=seed, timeout=timeout)

    short = threading.Thread(target=hang, args=(1, 8))
    long = threading.Thread(target=hang, args=(2, 20))
    long.start()
    short.start()
    short.join()
    assert not results[1].passed
    assert results[1].failures["simulation"].startswith("killed after 8 s of wall-clock time")
    assert long.is_alive(), "the other simulator was killed too"
    long.join()
    assert results[2].failures["simulation"].startswith("killed after 20 s")
