"""``wse bench sim`` through click's CliRunner: the figures it promises, from a real run on small
meshes (no timing is asserted: the machine is shared; only that each figure is there and
consistent with the others)."""

import json

import pytest
from click.testing import CliRunner

from wse.host.cli import main

ROW_KEYS = {"mesh", "tiles", "shape", "nnz", "cycles", "compiled_cycles_per_second",
            "cocotb_cycles_per_second", "speedup", "free_running_cycles_per_second",
            "harness_efficiency", "pe_cycles_per_second", "build_seconds", "hierarchical",
            "engine", "lanes_cycles_per_second", "verilator_cycles_per_second",
            "lanes_vs_verilator"}


def run_bench_sim(*meshes):
    result = CliRunner().invoke(main, ["bench", "sim", *(a for m in meshes for a in ("--mesh", m)),
                                       "--cocotb-max-tiles", "1", "--verilator-max-tiles", "1",
                                       "--threads", "1", "--json"])
    assert result.exit_code == 0, result.output + result.stderr
    return json.loads(result.stdout)


def check_row(row, tiles):
    """One mesh's figures: every key, and each ratio the ratio of the figures it is made of."""
    assert set(row) == ROW_KEYS and row["tiles"] == tiles
    # both models on meshes this small (the default, Verilator's, whatever the limit), their
    # ratio; the compiled figures are the default model's
    assert row["engine"] == "verilator"
    assert row["compiled_cycles_per_second"] == row["verilator_cycles_per_second"]
    assert row["lanes_vs_verilator"] == pytest.approx(row["lanes_cycles_per_second"]
                                                      / row["verilator_cycles_per_second"])
    assert row["cycles"] > 0 and row["build_seconds"] > 0 and row["hierarchical"] is False
    assert row["harness_efficiency"] == pytest.approx(
        row["compiled_cycles_per_second"] / row["free_running_cycles_per_second"])
    assert row["pe_cycles_per_second"] == pytest.approx(
        row["compiled_cycles_per_second"] * row["tiles"])
    # the cocotb path only up to its tile limit; where it ran, the speedup is the two rates' ratio
    if row["cocotb_cycles_per_second"] is None:
        assert row["speedup"] is None
    else:
        assert row["speedup"] == pytest.approx(row["compiled_cycles_per_second"]
                                               / row["cocotb_cycles_per_second"])


@pytest.mark.slow      # about a minute; `wse bench sim` itself is `make results`'s
@pytest.mark.xdist_group("compiled")
def test_bench_sim_measures_both_paths(figure):
    figures = run_bench_sim("1x1")
    (one,) = figures["meshes"]
    check_row(one, tiles=1)
    assert one["mesh"] == "1x1" and one["cocotb_cycles_per_second"] > 0
    assert figures["threads"]["mesh"] == "1x1" and figures["threads"]["1"] > 0
    figure(f"wse bench sim 1x1: {one['cycles']} cycles, compiled "
           f"{one['compiled_cycles_per_second']:,.0f} cycles/s (Verilator's model; lanes "
           f"{one['lanes_cycles_per_second']:,.0f}), cocotb "
           f"{one['cocotb_cycles_per_second']:,.0f} cycles/s ({one['speedup']:.1f}x), harness "
           f"efficiency {one['harness_efficiency']:.2f}")


@pytest.mark.slow
@pytest.mark.xdist_group("compiled")
def test_bench_sim_limits_cocotb_and_threads_to_the_meshes_asked(figure):
    """Two meshes (a second Verilator build, so behind `slow`): cocotb only up to its tile limit,
    the threads figure of the largest mesh only."""
    figures = run_bench_sim("1x1", "1x2")
    one, two = figures["meshes"]
    check_row(one, tiles=1)
    check_row(two, tiles=2)
    assert (one["mesh"], two["mesh"]) == ("1x1", "1x2")
    assert one["cocotb_cycles_per_second"] > 0 and two["cocotb_cycles_per_second"] is None
    assert set(figures["threads"]) == {"mesh", "1"} and figures["threads"]["mesh"] == "1x2"
    assert figures["threads"]["1"] > 0
    figure(f"wse bench sim 1x2: {two['compiled_cycles_per_second']:,.0f} cycles/s")


def test_bench_sim_refuses_a_bad_mesh():
    result = CliRunner().invoke(main, ["bench", "sim", "--mesh", "4by4"])
    assert result.exit_code == 2
    assert "mesh must be ROWSxCOLS" in result.output
