"""Running the router's cocotb testbench: the design the tests use and one call to run them."""

import json

from wse.rtl.route_table import Position, RouteTable
from wse.rtl.router import Router

from .cocotb_run import build_once, run

__all__ = ["TEST_MODULE", "BENCH_MODULE", "ELABORATED_ROUTES", "testbench_router",
           "run_router_tests"]


TEST_MODULE = "wse.tb.router_tests"
BENCH_MODULE = "wse.tb.router_bench"

#: The table the test design is elaborated with (``elaborated_routes`` checks it).
ELABORATED_ROUTES = {0: ("NESWR", "E"), 1: ("NESWR", "S"), 2: ("NESWR", "NR"),
                     10: ("WR", "ESR"), 11: [("W", "E"), ("W", "S")]}


def testbench_router(**overrides):
    """The router the testbench runs on: defaults plus an initial table, a forwarding
    configuration route (so configurations with hops are seen leaving on E) and a 32-bit drop
    counter (a million-wavelet fuzz drops more than the default 16 bits count)."""
    params = dict(n_colors=24, n_queues=2, depth=4, cfg_color=31, counter_width=32,
                  cfg_route=Position(rx="NESWR", tx="E"))
    params.update(overrides)
    params.setdefault("routes", RouteTable(params["n_colors"], {
        c: r for c, r in ELABORATED_ROUTES.items() if c < params["n_colors"]}))
    return Router(**params)


def run_router_tests(*, sim="verilator", testcase=None, waves=False, seed=1, fuzz=None,
                     module=TEST_MODULE, extra_env=None, throughput_count=None,
                     timeout=None, **overrides):
    """Build the testbench router for ``sim`` and run ``module`` (all tests, or one by name)."""
    router = testbench_router(**overrides)
    params = router.params()
    built = build_once(lambda: router, key=json.dumps(params, sort_keys=True),
                       top=f"router_q{router.n_queues}d{router.depth}", sim=sim, waves=waves)
    params["seed"] = seed
    if fuzz is not None:
        params["fuzz"] = fuzz
    if throughput_count is not None:
        params["throughput_count"] = throughput_count
    return run(built, module=module, testcase=testcase, params=params, seed=seed,
               name=f"{testcase or module.rsplit('.', 1)[-1]}-s{seed}", extra_env=extra_env,
               timeout=timeout)
