"""FPGA builds: board descriptions, PLL settings, report parsing, and real bitstream builds.

The default suite builds one small target (a 1x1 mesh on the ULX3S-85F, about two minutes on
two cores, bounded by a timeout); the default targets of ``make bitstream`` are ``slow``.
"""

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from wse.fpga.boards import BOARDS, board, mesh_config
from wse.fpga.build import BuildError, build
from wse.fpga.clocks import ecp5_pll, ice40_pll
from wse.fpga.report import cell_counts, fit_error, nextpnr_report
from wse.host.cli.build import build as build_command

CI_TIMEOUT = 600        # seconds: a hung or runaway tool fails the test instead of the CI job

KEYS = {"board", "mesh", "bitstream", "luts", "ffs", "brams", "dsps", "fmax_mhz", "target_mhz",
        "timing_met", "luts_per_pe", "seconds"}


def test_unknown_board_is_named():
    with pytest.raises(ValueError, match=r"board must be one of icebreaker, ulx3s-85f, "
                                         r"not 'de10'"):
        board("de10")


def test_board_configs_are_valid_meshes():
    for b in BOARDS.values():
        config = mesh_config(b)
        assert (config.rows, config.cols) == b.default_mesh
    assert mesh_config(BOARDS["icebreaker"], 1, 2).cols == 2


@pytest.mark.parametrize("pick, f_in, f_out", [
    (ice40_pll, 12e6, 24e6), (ice40_pll, 12e6, 36e6), (ecp5_pll, 25e6, 100e6),
    (ecp5_pll, 25e6, 50e6),
])
def test_pll_settings_hit_the_frequency(pick, f_in, f_out):
    settings = pick(f_in, f_out)
    assert abs(settings.out_hz - f_out) / f_out < 0.01
    params = dict(settings.params)
    if pick is ice40_pll:
        vco = f_in / (params["DIVR"] + 1) * (params["DIVF"] + 1)
        assert 533e6 <= vco <= 1066e6
        assert vco / 2 ** params["DIVQ"] == settings.out_hz
    else:
        assert settings.out_hz == f_in / params["CLKI_DIV"] * params["CLKFB_DIV"]
        assert 400e6 <= settings.out_hz * params["CLKOP_DIV"] <= 800e6


def test_pll_out_of_range_is_an_error():
    with pytest.raises(ValueError, match="iCE40 PLL output must be in 16..275 MHz, not 5 MHz"):
        ice40_pll(12e6, 5e6)


def test_cell_counts_by_family():
    stat = {"design": {"num_cells_by_type": {"LUT4": 100, "CCU2C": 10, "TRELLIS_DPR16X4": 2,
                                             "TRELLIS_FF": 50, "DP16KD": 3, "MULT18X18D": 4}}}
    counts = cell_counts(stat, "ecp5")
    assert (counts["luts"], counts["ffs"], counts["brams"], counts["dsps"]) == (128, 50, 3, 4)
    assert (counts["logic_luts"], counts["lutram"]) == (120, 2)
    stat = {"design": {"num_cells_by_type": {"SB_LUT4": 7, "SB_DFFE": 2, "SB_DFFSR": 3,
                                             "SB_RAM40_4K": 1, "SB_MAC16": 2}}}
    counts = cell_counts(stat, "ice40")
    assert (counts["luts"], counts["ffs"], counts["brams"], counts["dsps"]) == (7, 5, 1, 2)


def test_nextpnr_report_takes_the_limiting_clock():
    report = {"utilization": {"ICESTORM_LC": {"used": 10, "available": 5280}},
              "fmax": {"fast": {"achieved": 90.0, "constraint": 100.0},
                       "slow": {"achieved": 30.0, "constraint": 24.0}}}
    fmax, constraint, utilisation = nextpnr_report(report)
    assert (fmax, constraint) == (90.0, 100.0)
    assert utilisation["ICESTORM_LC"] == {"used": 10, "available": 5280}
    assert nextpnr_report({"utilization": {}})[0] is None


def test_fit_error_names_the_resource():
    log = ("Info: Device utilisation:\n"
           "Info: \t         ICESTORM_LC:    5738/   5280   108%\n"
           "Info: \t        ICESTORM_RAM:       5/     30    16%\n"
           "ERROR: Unable to place cell 'x', no BELs remaining to implement cell type "
           "'ICESTORM_LC'\n")
    assert fit_error(log) == "ICESTORM_LC 5738 used, 5280 available"
    assert fit_error("ERROR: something else\n") == "something else"
    assert fit_error("Info: all well\n") is None


def test_cli_rejects_bad_mesh_and_board():
    runner = CliRunner()
    result = runner.invoke(build_command, ["--board", "icebreaker", "--mesh", "0x2"])
    assert result.exit_code != 0 and "mesh must be ROWSxCOLS" in result.output
    result = runner.invoke(build_command, ["--board", "de10"])
    assert result.exit_code != 0 and "'de10' is not one of" in result.output


def _check_report(result, rows, cols):
    assert KEYS <= set(result)
    assert result["mesh"] == f"{rows}x{cols}"
    bitstream = Path(result["bitstream"])
    assert bitstream.is_file() and bitstream.stat().st_size > 0
    assert result["luts"] > 0 and result["ffs"] > 0
    assert result["dsps"] >= rows * cols          # one MAC per core, in a DSP block
    assert result["fmax_mhz"] is not None and 1 < result["fmax_mhz"] < 1000
    assert result["timing_met"] == (result["fmax_mhz"] >= result["target_mhz"])
    assert result["luts_per_pe"] == pytest.approx(result["luts"] / (rows * cols), abs=0.1)
    json.dumps(result)


@pytest.mark.xdist_group("fpga_build")
def test_small_build_through_the_cli(tmp_path):
    """The CI build: a 1x1 mesh on the ULX3S-85F, through ``wse build --json``."""
    runner = CliRunner()
    result = runner.invoke(build_command, ["--board", "ulx3s-85f", "--mesh", "1x1", "--out",
                                       str(tmp_path), "--json"],
                           catch_exceptions=False, env={"WSE_BUILD_TIMEOUT": str(CI_TIMEOUT)})
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout.strip().splitlines()[-1])
    _check_report(report, 1, 1)
    assert report["board"] == "ulx3s-85f"
    timing = (tmp_path / "ulx3s-85f-1x1" / "top.tim").read_text()
    # Two nets on global networks: the clock, and the reset through its DCCA.
    assert len(re.findall(r"routing clock net \S+ using global \d+", timing)) == 2, timing


TOOLS = "<tools>"    # in `files_before_tools`: the script that runs the tools


def files_before_tools(monkeypatch, *files, **build_args):
    """Run :func:`build` (``build_args``) up to where the tools would start, nothing
    synthesised; return the text of each of ``files`` in the build directory then
    (:data:`TOOLS`: the script that runs the tools)."""
    import wse.fpga.build as fpga_build

    class Stop(Exception):
        pass

    def stop(script, cwd, *args):
        raise Stop([(Path(cwd) / (script if f == TOOLS else f)).read_text() for f in files])

    monkeypatch.setattr(fpga_build, "run_script", stop)
    with pytest.raises(Stop) as stopped:
        build(**build_args)
    texts = stopped.value.args[0]
    return texts[0] if len(texts) == 1 else texts


@pytest.mark.parametrize("mesh, keep_tiles, kept", [
    ((1, 1), None, False), ((1, 2), None, True), ((1, 1), True, True)])
def test_meshes_of_several_tiles_keep_the_tile_module(mesh, keep_tiles, kept, tmp_path,
                                                       monkeypatch):
    """The Yosys script keeps ``wse_tile`` as one module (mapped once) unless the mesh has one
    tile or ``keep_tiles`` says otherwise."""
    script = files_before_tools(monkeypatch, "top.ys", board_name="icebreaker", mesh=mesh,
                                out=tmp_path, keep_tiles=keep_tiles)
    assert ("setattr -mod -set keep_hierarchy 1 wse_tile" in script) == kept
    assert f"synth_ice40 {BOARDS['icebreaker'].synth_opts} -top top" in script


def test_the_icebreaker_is_placed_with_timing_weighted_up(tmp_path, monkeypatch):
    """nextpnr-ice40 gets the ULX3S's placement options (timing weighted up, sharpened
    criticalities, timing-driven rip-up) and keeps its default router."""
    tools = files_before_tools(monkeypatch, TOOLS, board_name="icebreaker", out=tmp_path,
                               seed=2)
    assert "--placer-heap-timingweight 160 --placer-heap-critexp 8 --tmg-ripup" in tools
    assert "--seed 2" in tools and "router2" not in tools


def test_the_ulx3s_flattens_its_4x4_and_routes_with_router2(tmp_path, monkeypatch):
    """The ULX3S's default is the 4x4, every tile flattened into the top (sixteen kept tile
    modules do not fit the ECP5-85F), placed with timing weighted up and routed by nextpnr's
    router2; ``keep_tiles=True`` keeps the tile module again."""
    synth, tools = files_before_tools(monkeypatch, "top.ys", TOOLS, board_name="ulx3s-85f",
                                      out=tmp_path)
    assert BOARDS["ulx3s-85f"].default_mesh == (4, 4)
    assert (tmp_path / "ulx3s-85f-4x4").is_dir()
    assert "keep_hierarchy" not in synth
    assert "--router router2" in tools and "--seed 1" in tools
    assert "--placer-heap-timingweight 160 --placer-heap-critexp 8 --tmg-ripup" in tools
    synth = files_before_tools(monkeypatch, "top.ys", board_name="ulx3s-85f", mesh=(1, 2),
                               out=tmp_path, keep_tiles=True)
    assert "setattr -mod -set keep_hierarchy 1 wse_tile" in synth


@pytest.mark.parametrize("name, buffered", [("ulx3s-85f", True), ("icebreaker", False)])
def test_the_ecp5_reset_reaches_the_flip_flops_through_a_global_buffer(name, buffered, tmp_path,
                                                                       monkeypatch):
    """On the ECP5 the reset synchroniser's output drives the design's reset through a DCCA, so
    that nextpnr routes it on a global network (a 4x4's critical path was the reset in general
    routing); the iCE40 keeps its reset as it was. Read from the RTLIL."""
    rtlil = files_before_tools(monkeypatch, "top.il", board_name=name, mesh=(1, 1),
                               out=tmp_path)
    buffers = re.findall(r"cell \\DCCA \\(\S+)\n((?:    connect .*\n)+)", rtlil)
    if not buffered:
        assert "DCCA" not in rtlil
        return
    assert [b[0] for b in buffers] == ["reset_buf"]
    ports = dict(line.split()[1:3] for line in buffers[0][1].splitlines())
    assert ports == {"\\CLKI": "\\reset_rst", "\\CE": "1'1", "\\CLKO": "\\rst"}


def test_runaway_tools_are_stopped(tmp_path):
    from wse.fpga.build import run_script

    (tmp_path / "hang.sh").write_text("sleep 30\n")
    with pytest.raises(BuildError, match=r"build did not finish in 0.5 s"):
        run_script("hang.sh", tmp_path, None, 0.5, tmp_path / "hang.log")


@pytest.mark.slow
@pytest.mark.parametrize("name", list(BOARDS))
def test_default_targets(name, tmp_path):
    """``make bitstream``'s targets: the board's default mesh."""
    b = BOARDS[name]
    result = build(name, out=tmp_path, timeout=7200)
    _check_report(result, *b.default_mesh)
