"""Shared pytest setup: a ``figures`` section at the end of the run.

Tests call ``report_figure(record_property, line)``; the lines travel with the test reports
(also from pytest-xdist workers) and are printed together after the results.
"""

import pytest


def report_figure(record_property, line):
    record_property("figure", line)


@pytest.fixture
def figure(record_property):
    return lambda line: report_figure(record_property, line)


def pytest_terminal_summary(terminalreporter):
    lines = []
    stats = terminalreporter.stats
    for report in stats.get("passed", []) + stats.get("failed", []):
        for name, value in getattr(report, "user_properties", []):
            if name == "figure":
                lines.append(value)
    if lines:
        terminalreporter.section("figures")
        for line in sorted(lines):
            terminalreporter.write_line(line)
