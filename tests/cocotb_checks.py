"""Helpers for pytest tests that run cocotb testbenches through :mod:`sim.cocotb_run`."""

import re

import pytest

#: Both simulators; each one's tests share a pytest-xdist worker (and so its builds).
SIMS = [pytest.param(sim, marks=pytest.mark.xdist_group(sim)) for sim in ("verilator", "icarus")]
#: Both simulators, Icarus's run (the second opinion, about four times slower) under ``slow``:
#: for the long tests, so that the default suite stays within its time.
SIMS_ICARUS_SLOW = [SIMS[0], pytest.param("icarus", marks=[pytest.mark.xdist_group("icarus"),
                                                           pytest.mark.slow])]
#: Both simulators, Verilator's run under ``slow``: for a design no other test builds, whose
#: Verilator run is mostly its own build (a minute and more), where Icarus compiles in seconds.
SIMS_VERILATOR_SLOW = [pytest.param("verilator", marks=[pytest.mark.xdist_group("verilator"),
                                                        pytest.mark.slow]), SIMS[1]]

#: Log lines that carry a test's figures (shown in the run's "figures" section).
FIGURE = re.compile(r"INFO\s+test\s+(\S.*(?:copies delivered|watchdog said|bit-exact).*)$")


def check(result, figure, label):
    """Report the figures a run logged, then fail with the run's own messages if it failed."""
    log = result.test_dir / "sim.log"
    for line in (log.read_text().splitlines() if log.exists() else []):
        match = FIGURE.search(line)
        if match:
            figure(f"{label}: {match[1]}")
    problems = "\n".join(f"{name}: {message}" for name, message in result.failures.items())
    assert result.passed, f"{result.failed} of {result.tests} failed (log: {log})\n{problems}"
