"""``wse export --mesh``: a mesh a peer can build with stock tools.

The export goes through the command line (click's CliRunner), as a new user's would; the
Verilog must then build under Verilator with ``-Wall`` and only the ``.vlt`` file written beside
it (no ``-Wno-fatal``), the FuseSoC core must name the top, the files and the generation
parameters, and the core options must reach the Verilog.
"""

import re
import subprocess

import pytest
from click.testing import CliRunner

from wse.host.cli import main
from wse.sim import toolchain
from wse.sim.export_mesh import TOP, WAIVERS, lint

#: A small mesh with every core option off its default, so each one is seen to arrive.
OPTIONS = {"--n-feat": 4, "--n-tok": 4, "--n-out": 3, "--lanes": 2, "--acc-buffers": 2,
           "--depth": 2, "--psum-depth": 8}


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """``(folder, result)`` of ``wse export --mesh 2x2`` with :data:`OPTIONS`."""
    folder = tmp_path_factory.mktemp("export")
    args = [a for option, value in OPTIONS.items() for a in (option, value)]
    result = invoke("export", "--mesh", "2x2", *args, "-o", folder / "mesh.v")
    assert result.exit_code == 0, result.output
    return folder, result


def verilator(*args, cwd=None):
    toolchain.setup()
    return subprocess.run(["verilator", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd)


@pytest.mark.xdist_group("export")
def test_export_writes_three_files_and_prints_them(exported):
    folder, result = exported
    assert result.stdout.split() == [str(folder / f"mesh.{ext}") for ext in ("v", "vlt", "core")]
    assert "intakes  s_axis_w0, s_axis_w1" in result.stderr
    assert "outlets  m_axis_s0, m_axis_s1" in result.stderr
    assert "_tdata[31:0] _tdest[4:0] _tuser _tvalid _tready (no tlast)" in result.stderr
    assert ("core parameters: n_feat=4, n_tok=4, n_out=3, lanes=2, depth=2, acc_buffers=2, "
            "psum_depth=8, counter_adders=1, held_copies=1, tag_slots=True, "
            "fmt=int16") in result.stderr
    assert "NOT waived" not in result.stderr


@pytest.mark.xdist_group("export")
def test_core_options_reach_the_verilog(exported):
    folder, _ = exported
    text = (folder / "mesh.v").read_text()
    memories = {name: (width, int(top) + 1) for width, name, top in      # name: (bits, depth)
                re.findall(r"^\s*reg (\[\d+:0\]) (\w+) \[(\d+):0\];", text, re.MULTILINE)}
    # lanes=2: two banks of n_tok / lanes = 2 tokens each, for n_feat=4 features.
    assert memories["x0"] == ("[15:0]", 4 * 2) and memories["x1"] == ("[15:0]", 4 * 2)
    assert "x2" not in memories
    assert memories["mask0"] == ("[1:0]", 4)            # a bit per token of a bank, per feature
    assert memories["y"] == ("[15:0]", 3 * 4)           # n_out * n_tok results
    # acc_buffers=2: each bank's buffers are one memory, buffer k at k * tpb.
    assert {name for name in memories if name.startswith("acc")} == {"acc0", "acc1"}
    assert memories["acc0"] == ("[31:0]", 2 * 2)


@pytest.mark.xdist_group("export")
def test_verilator_wall_is_silent_with_the_vlt_only(exported):
    folder, _ = exported
    # As a peer would type it, in the folder, with no flag of the project's.
    run = verilator("--lint-only", "-Wall", "mesh.vlt", "mesh.v", "--top-module", TOP,
                    cwd=folder)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "%Warning" not in run.stderr and "%Error" not in run.stderr
    # Verilating to C++ runs the passes lint skips (scheduling: UNOPTFLAT and the like).
    run = verilator("--cc", "-Wall", folder / "mesh.vlt", folder / "mesh.v", "--top-module",
                    TOP, "--Mdir", folder / "obj")
    assert run.returncode == 0, run.stderr[-3000:]
    assert "%Warning" not in run.stderr and "%Error" not in run.stderr


@pytest.mark.xdist_group("export")
def test_vlt_waives_exactly_what_the_verilog_raises(exported):
    folder, _ = exported
    before = lint(folder / "mesh.v")
    assert sum(before.values()) > 100          # the file alone is not clean: the .vlt matters
    vlt = (folder / "mesh.vlt").read_text()
    assert vlt.startswith("`verilator_config\n")
    waivers = [line for line in vlt.splitlines() if line.startswith("lint_off")]
    assert waivers == [f'lint_off -rule {rule} -file "*mesh.v"' for rule in sorted(before)]
    assert set(before) <= set(WAIVERS)
    for rule in before:                        # each waiver says why
        assert f"// {WAIVERS[rule]}\nlint_off -rule {rule} " in vlt


@pytest.mark.xdist_group("export")
def test_core_file_names_top_files_and_parameters(exported):
    import yaml
    folder, _ = exported
    text = (folder / "mesh.core").read_text()
    assert text.startswith("CAPI=2:\n")
    core = yaml.safe_load(text)
    assert core["name"] == "wse-mini::mesh:0.1.0"
    files = core["filesets"]["rtl"]["files"]
    assert files == [{"mesh.vlt": {"file_type": "vlt"}},
                     {"mesh.v": {"file_type": "verilogSource"}}]
    for target in ("default", "lint"):
        assert core["targets"][target]["toplevel"] == TOP
        assert core["targets"][target]["filesets"] == ["rtl"]
        assert "parameters" not in core["targets"][target]      # documentation only
    assert core["targets"]["lint"]["tools"]["verilator"]["mode"] == "lint-only"
    params = core["parameters"]
    assert {name: params[name]["default"] for name in ("rows", "cols", "n_feat", "n_tok",
                                                       "n_out", "lanes", "depth",
                                                       "acc_buffers", "psum_depth")} == \
        {"rows": 2, "cols": 2, "n_feat": 4, "n_tok": 4, "n_out": 3, "lanes": 2, "depth": 2,
         "acc_buffers": 2, "psum_depth": 8}
    for name, param in params.items():
        assert "Baked in at generation" in param["description"], name
        assert param["datatype"] in ("int", "str") and param["paramtype"] == "vlogparam"


@pytest.mark.parametrize("args, message", [
    (("--n-tok", 3), "Invalid value for '--n-tok': n_tok must be a power of two, not 3"),
    (("--lanes", 3), "Invalid value for '--lanes': lanes must be a power of two dividing "
                     "n_tok (8), not 3"),
    (("--depth", 0), "Invalid value for '--depth': depth must be a positive integer, not 0"),
    (("--acc-buffers", 0), "Invalid value for '--acc-buffers': acc_buffers must be a positive "
                           "integer, not 0"),
    (("--counter-adders", 3), "Invalid value for '--counter-adders': counter_adders must be 1 "
                              "or 2, not 3"),
    (("--held-copies", 0), "Invalid value for '--held-copies': held_copies must be 1 or 2, "
                           "not 0"),
    (("--tag-slots", "maybe"), "Invalid value for '--tag-slots': 'maybe' is not a valid "
                               "boolean"),
    (("--edges", "X"), "Invalid value for '--edges': edges must be a string of N, E, S, W, "
                       "not 'X'"),
    (("--n-feat", 4096, "--n-tok", 16), "Invalid value for '--n-feat' / '--n-tok': "
                                         "n_feat * n_tok must be at most 32768"),
    (("--n-tok", "four"), "Invalid value for '--n-tok': 'four' is not a valid integer"),
])
def test_bad_core_option_is_a_one_line_error(tmp_path, args, message):
    result = invoke("export", "--mesh", "2x2", *args, "-o", tmp_path / "mesh.v")
    assert result.exit_code == 2
    assert f"Error: {message}" in result.output
    assert [line for line in result.output.splitlines() if line.startswith("Error:")] and \
        "Traceback" not in result.output
    assert not list(tmp_path.iterdir())


def test_core_options_are_for_the_mesh_not_a_subcommand(tmp_path):
    result = invoke("export", "--n-tok", 4, "router", "-o", tmp_path / "r.v")
    assert result.exit_code == 2
    assert "are for the mesh" in result.output


def test_output_must_be_the_verilog_file(tmp_path):
    result = invoke("export", "--mesh", "1x1", "-o", tmp_path / "mesh.vlt")
    assert result.exit_code == 2
    assert "must be the Verilog file (such as mesh.v)" in result.output


@pytest.mark.parametrize("subcommand", [[], ["router"]])
@pytest.mark.parametrize("where, message", [
    (lambda d: d / "missing" / "mesh.v", "does not exist (create it first)"),
    (lambda d: d / "file" / "mesh.v", "is not a directory"),
    (lambda d: d / "mesh.sv", "file name must end in .v, not"),
])
def test_output_is_checked_before_anything_runs(tmp_path, subcommand, where, message):
    (tmp_path / "file").write_text("a regular file\n")
    mesh = [] if subcommand else ["--mesh", "1x1"]
    result = invoke("export", *mesh, *subcommand, "-o", where(tmp_path))
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and message in errors[0] and "Traceback" not in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_a_warning_without_a_waiver_fails_the_export(tmp_path, monkeypatch):
    from wse.sim import export_mesh

    reasons = dict(export_mesh.WAIVERS)
    reasons.pop("WIDTHEXPAND")                  # as if Verilator raised a rule nobody reviewed
    monkeypatch.setattr(export_mesh, "WAIVERS", reasons)
    result = invoke("export", "--mesh", "1x1", "-o", tmp_path / "mesh.v")
    assert result.exit_code == 1
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and errors[0].startswith("Error: Verilator -Wall raises ")
    assert "WIDTHEXPAND" in errors[0] and "does not waive" in errors[0]
