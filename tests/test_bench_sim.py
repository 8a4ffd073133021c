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


@pytest.mark.xdist_group("compiled")
def test_bench_sim_measures_both_paths_and_threads(figure):
    result = CliRunner().invoke(main, ["bench", "sim", "--mesh", "1x1", "--mesh", "1x2",
                                       "--cocotb-max-tiles", "1", "--verilator-max-tiles", "1",
                                       "--threads", "1", "--json"])
    assert result.exit_code == 0, result.output + result.stderr
    figures = json.loads(result.stdout)
    one, two = figures["meshes"]
    assert set(one) == set(two) == ROW_KEYS
    assert (one["mesh"], two["mesh"]) == ("1x1", "1x2") and (one["tiles"], two["tiles"]) == (1, 2)
    # the cocotb path only where asked (tiles <= 1); the speedup is the ratio of the two rates
    assert one["speedup"] == pytest.approx(one["compiled_cycles_per_second"]
                                           / one["cocotb_cycles_per_second"])
    assert two["cocotb_cycles_per_second"] is None and two["speedup"] is None
    # both models on meshes this small (the default, Verilator's, whatever the limit), their
    # ratio; the compiled figures are the default model's
    for row in (one, two):
        assert row["engine"] == "verilator"
        assert row["compiled_cycles_per_second"] == row["verilator_cycles_per_second"]
        assert row["lanes_vs_verilator"] == pytest.approx(row["lanes_cycles_per_second"]
                                                          / row["verilator_cycles_per_second"])
        assert row["cycles"] > 0 and row["build_seconds"] > 0 and row["hierarchical"] is False
        assert row["harness_efficiency"] == pytest.approx(
            row["compiled_cycles_per_second"] / row["free_running_cycles_per_second"])
        assert row["pe_cycles_per_second"] == pytest.approx(
            row["compiled_cycles_per_second"] * row["tiles"])
    # --threads 1: Verilator's single-threaded figure of the largest mesh only
    assert set(figures["threads"]) == {"mesh", "1"} and figures["threads"]["mesh"] == "1x2"
    assert figures["threads"]["1"] > 0
    figure(f"wse bench sim 1x1: {one['cycles']} cycles, compiled "
           f"{one['compiled_cycles_per_second']:,.0f} cycles/s (Verilator's model; lanes "
           f"{one['lanes_cycles_per_second']:,.0f}), cocotb "
           f"{one['cocotb_cycles_per_second']:,.0f} cycles/s ({one['speedup']:.1f}x), harness "
           f"efficiency {one['harness_efficiency']:.2f}; 1x2 "
           f"{two['compiled_cycles_per_second']:,.0f} cycles/s")


def test_bench_sim_refuses_a_bad_mesh():
    result = CliRunner().invoke(main, ["bench", "sim", "--mesh", "4by4"])
    assert result.exit_code == 2
    assert "mesh must be ROWSxCOLS" in result.output
