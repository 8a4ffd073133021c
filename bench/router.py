"""``wse bench router``: throughput, hop latency and a long fuzz of the router, measured in RTL."""

import json
import tempfile
import time
from pathlib import Path

from wse.sim.router_run import BENCH_MODULE, run_router_tests

__all__ = ["bench_router", "bench_uniform_load", "fuzz_failures"]


def bench_uniform_load(*, sim="verilator", count=4000, seed=1, n_queues=2, depth=4):
    """Saturation throughput under uniform random traffic for one router configuration."""
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "figures.json"
        result = run_router_tests(sim=sim, module=BENCH_MODULE, testcase="uniform_load",
                                  seed=seed, fuzz=count, extra_env={"WSE_BENCH_OUT": str(out)},
                                  n_queues=n_queues, depth=depth)
        if not result.passed:
            raise RuntimeError(f"uniform-load bench failed on {sim}: {result.failures}; "
                               f"log: {result.test_dir / 'sim.log'}")
        return json.loads(out.read_text())


def bench_router(*, sim="verilator", fuzz=100_000, seed=1, throughput_count=2000):
    """Run the router benchmark testbench; returns its figures as a dict.

    Raises ``RuntimeError`` when the testbench failed (the figures it got are in the message).
    """
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "figures.json"
        start = time.monotonic()
        result = run_router_tests(sim=sim, module=BENCH_MODULE, testcase="router_figures",
                                  seed=seed, fuzz=fuzz, extra_env={"WSE_BENCH_OUT": str(out)},
                                  throughput_count=throughput_count)
        figures = json.loads(out.read_text()) if out.exists() else {}
    figures["simulator"] = sim
    figures["seed"] = seed
    figures["wall_seconds"] = round(time.monotonic() - start, 1)
    if not result.passed:
        raise RuntimeError(f"router bench failed on {sim}: {result.failures}; "
                           f"figures so far: {figures}; log: {result.test_dir / 'sim.log'}")
    return figures


def fuzz_failures(figures):
    """What a fuzz's figures show wrong, as one line (empty when nothing): copies lost,
    reordered or unexpected, inputs that took a word before their own update was seen, or
    drops counted other than expected."""
    wrong = [f"{figures[key]} {key}" for key in ("lost", "reordered", "unexpected",
                                                   "early_takes") if figures.get(key)]
    if figures["drops_counted"] != figures["drops_expected"]:
        wrong.append(f"drops counted {figures['drops_counted']}, expected "
                     f"{figures['drops_expected']}")
    return ", ".join(wrong)
