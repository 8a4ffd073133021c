"""Parts out of context (``wse build --part``): argument checks, cell counts and nextpnr reports
from canned JSON, the flow end to end on stand-in tools, and (``slow``) one real build of a
small router.
"""

import json
import os
import stat as stat_mode
import sys

import pytest
from click.testing import CliRunner

from wse.fpga import parts
from wse.fpga.build import BuildError
from wse.fpga.parts import (
    DEVICES,
    PARTS,
    ROUTER_PARAMS,
    build_part,
    parse_seeds,
    part_figures,
    part_verilog,
    seed_result,
)
from wse.host.cli.build import build as build_command

ECP5_STAT = {"design": {"num_cells_by_type": {
    "LUT4": 1000, "CCU2C": 10, "TRELLIS_DPR16X4": 7, "L6MUX21": 5, "PFUMX": 9,
    "TRELLIS_FF": 300, "DP16KD": 2, "MULT18X18D": 1}}}
ICE40_STAT = {"modules": {"\\wse_tile": {"num_cells_by_type": {
    "SB_LUT4": 500, "SB_CARRY": 20, "SB_DFF": 10, "SB_DFFE": 30, "SB_RAM40_4K": 3,
    "SB_MAC16": 1}}}}


@pytest.mark.parametrize("text, seeds", [("1,2,3", (1, 2, 3)), ("7", (7,)), (" 0, 5", (0, 5))])
def test_seeds_parse(text, seeds):
    assert parse_seeds(text) == seeds


@pytest.mark.parametrize("text, message", [
    ("1,x", r"seeds must be a comma-separated list of non-negative integers, not '1,x'"),
    ("", r"seeds must be a comma-separated list of non-negative integers, not ''"),
    ("-1", r"seeds must be a comma-separated list of non-negative integers, not '-1'"),
    ("1,,2", r"not '1,,2'"),
    ("2,2", r"seeds must be distinct, not '2,2'"),
])
def test_bad_seeds_are_named(text, message):
    with pytest.raises(ValueError, match=message):
        parse_seeds(text)


def test_bad_part_and_device_are_named():
    with pytest.raises(ValueError, match=r"part must be one of router, tile, not 'alu'"):
        part_verilog("alu", "up5k")
    with pytest.raises(ValueError, match=r"device must be one of ecp5-85f, up5k, not 'xc7'"):
        part_verilog("router", "xc7")
    with pytest.raises(ValueError, match=r"mesh applies to the tile only"):
        part_verilog("router", "up5k", mesh=(2, 2))


def test_devices_name_their_boards():
    from wse.fpga.boards import BOARDS

    for device in DEVICES.values():
        assert BOARDS[device.board].family == device.family
    assert PARTS == ("router", "tile")
    assert ROUTER_PARAMS == {"n_colors": 24, "n_queues": 2, "depth": 2, "u_turns": False}


def test_ecp5_figures_keep_lut_ram_apart():
    figures = part_figures(ECP5_STAT, "ecp5")
    # LUT4 logic: LUT4 plus two per carry cell; the wide multiplexers are not LUTs.
    assert figures == {"luts": 1020, "lut4_cells": 1000, "ffs": 300, "lutram": 7, "brams": 2,
                       "dsps": 1}


def test_ice40_figures():
    figures = part_figures(ICE40_STAT, "ice40")
    assert figures == {"luts": 500, "lut4_cells": 500, "ffs": 40, "lutram": 0, "brams": 3,
                       "dsps": 1}


def test_seed_result_reads_the_clock():
    report = {"utilization": {"TRELLIS_COMB": {"used": 1200, "available": 83640}},
              "fmax": {"$glbnet$clk": {"achieved": 26.4567, "constraint": 100.0}}}
    fmax, utilisation = seed_result(report)
    assert fmax == 26.46
    assert utilisation["TRELLIS_COMB"] == {"used": 1200, "available": 83640}
    assert seed_result({"utilization": {}, "fmax": {}})[0] is None


def _tool(path, body):
    """A stand-in tool: a Python script, executable."""
    path.write_text(f"#!{sys.executable}\nimport json, sys\nargs = sys.argv[1:]\n{body}")
    path.chmod(path.stat().st_mode | stat_mode.S_IXUSR)
    return str(path)


_YOSYS = f"""
open("stat.json", "w").write(json.dumps({ECP5_STAT!r}))
open("top.json", "w").write("{{}}")
"""
_NEXTPNR = """
seed = int(args[args.index("--seed") + 1])
assert "--out-of-context" in args and args[args.index("--freq") + 1] == "100"
assert "delete -port" not in open("synth.ys").read()
open(args[args.index("--log") + 1], "w").write("Info: placed\\n")
if seed == 9:
    sys.exit(1)
report = {"utilization": {"TRELLIS_COMB": {"used": 1100, "available": 83640}},
          "fmax": {"clk": {"achieved": 20.0 + seed, "constraint": 100.0}}}
open(args[args.index("--report") + 1], "w").write(json.dumps(report))
"""
_TOO_BIG = """
assert "--out-of-context" not in args       # nextpnr-ice40 has none: the ports are unported
assert "delete -port top/x:* top/w:clk %d" in open("synth.ys").read()
open(args[args.index("--log") + 1], "w").write(
    "Info: \\t         ICESTORM_LC:    9000/   5280   170%\\nERROR: no BELs remaining\\n")
sys.exit(1)
"""


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    """The flow with stand-ins for the Verilog, Yosys and nextpnr."""
    monkeypatch.setattr(parts, "part_verilog",
                        lambda part, device, mesh, params: ("top", "module top;\nendmodule\n",
                                                            {"n_colors": 2}))
    monkeypatch.setenv("YOSYS", _tool(tmp_path / "yosys", _YOSYS))
    monkeypatch.setenv("NEXTPNR_ECP5", _tool(tmp_path / "nextpnr", _NEXTPNR))
    monkeypatch.setenv("NEXTPNR_ICE40", _tool(tmp_path / "too_big", _TOO_BIG))
    return tmp_path


def test_flow_runs_every_seed(stand_in):
    result = build_part("router", "ecp5-85f", seeds=(1, 3, 2), out=stand_in / "out")
    assert result["fmax_mhz"] == [21.0, 23.0, 22.0]
    assert (result["fmax_mhz_min"], result["fmax_mhz_max"]) == (21.0, 23.0)
    assert (result["luts"], result["lutram"], result["ffs"]) == (1020, 7, 300)
    assert result["fits"] and result["fit_error"] is None
    assert result["params"] == {"n_colors": 2} and result["seeds"] == [1, 3, 2]
    build_dir = stand_in / "out" / "parts" / "router-ecp5-85f"
    assert result["build_dir"] == str(build_dir)
    assert json.loads((build_dir / "build.json").read_text()) == result
    assert (build_dir / "report-3.json").is_file()


def test_a_part_too_big_reports_the_resource(stand_in):
    result = build_part("tile", "up5k", seeds="1,2", out=stand_in)
    assert not result["fits"]
    assert result["fit_error"] == "ICESTORM_LC 9000 used, 5280 available"
    assert result["fmax_mhz"] == [None, None] and result["fmax_mhz_min"] is None
    assert result["luts"] == 0      # the canned stat is the ECP5's: no SB_LUT4 in it


def test_a_failing_tool_is_an_error(stand_in):
    with pytest.raises(BuildError, match=r"router on ecp5-85f: nextpnr failed with seed 9"):
        build_part("router", "ecp5-85f", seeds=(1, 9), out=stand_in)


@pytest.mark.parametrize("args, message", [
    ([], "give one of --board and --part (they are exclusive)"),
    (["--board", "icebreaker", "--part", "router"], "give one of --board and --part"),
    (["--part", "router"], "--part needs --device"),
    (["--part", "router", "--device", "up5k", "--mesh", "2x2"],
     "--mesh does not apply to --part router"),
    (["--part", "tile", "--device", "up5k", "--seed", "2"], "--seed does not apply to --part"),
    (["--part", "tile", "--device", "up5k", "--clock", "50"], "--clock does not apply"),
    (["--part", "tile", "--device", "up5k", "--flatten"], "--flatten does not apply to --part"),
    (["--board", "icebreaker", "--seeds", "1,2"], "--seeds does not apply to --board"),
    (["--board", "icebreaker", "--device", "up5k"], "--device does not apply to --board"),
    (["--part", "router", "--device", "up5k", "--seeds", "1,1"], "seeds must be distinct"),
    (["--part", "alu", "--device", "up5k"], "'alu' is not one of 'router', 'tile'"),
    (["--part", "router", "--device", "xc7"], "'xc7' is not one of 'ecp5-85f', 'up5k'"),
])
def test_cli_rejects_bad_options(args, message, tmp_path):
    result = CliRunner().invoke(build_command, [*args, "--out", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert message in result.output


@pytest.mark.slow
def test_small_router_alone_on_the_up5k(tmp_path):
    """A real build: a one-queue, two-color router through Yosys and nextpnr, one seed (about
    3100 iCE40 LUTs: 2.5 minutes on the loaded 2-core machine, so ``slow``)."""
    result = build_part("router", "up5k", seeds=(1,), out=tmp_path, timeout=600,
                        params={"n_colors": 2, "n_queues": 1, "depth": 2})
    assert result["params"]["n_colors"] == 2 and result["fits"]
    assert result["luts"] > 0 and result["ffs"] > 0 and result["lutram"] == 0
    assert len(result["fmax_mhz"]) == 1 and 1 < result["fmax_mhz_min"] < 1000
    assert os.path.isfile(os.path.join(result["build_dir"], "report-1.json"))
