"""``wse train``: the JSON it prints, the files it writes, resuming, and its errors."""

import json

import pytest
from click.testing import CliRunner

from wse.host.cli import main

FIELDS = ("test_accuracy", "weight_sparsity", "steps", "systems", "backend", "mesh_cycles",
          "dense_cycles", "io_cycles", "compute_cycles", "ideal_speedup", "weights_digest")


def saved_history(directory):
    return json.loads((directory / "report.json").read_text())["history"]


def _run(*args):
    return CliRunner().invoke(main, ["train", *args])


def test_json_report_and_output_directory(tmp_path):
    result = _run("--steps", "4", "--systems", "2", "--json", "--out", str(tmp_path))
    assert result.exit_code == 0, result.output + result.stderr
    report = json.loads(result.stdout)
    for field in FIELDS:
        assert field in report, field
    assert (report["steps"], report["systems"], report["backend"]) == (4, 2, "golden")
    assert 0 <= report["test_accuracy"] <= 1 and len(report["weights_digest"]) == 64
    assert report["mesh_cycles"] > 0 and report["dense_cycles"] >= report["mesh_cycles"]
    # every cycle counted: the edge transfers and the compute phases of the slowest system
    assert report["io_cycles"] > 0 and report["compute_cycles"] > 0
    assert report["mesh_cycles"] == sum(r["mesh_cycles"] for r in saved_history(tmp_path))
    assert all(r["mesh_cycles"] == r["io_cycles"] + r["compute_cycles"]
               for r in saved_history(tmp_path))
    assert report["ideal_speedup"] > report["speedup_vs_dense"] > 1
    for name in ("report.json", "checkpoint.npz", "loss.png", "cycles.png"):
        assert (tmp_path / name).stat().st_size > 0, name
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["weights_digest"] == report["weights_digest"] and len(saved["history"]) == 4


def test_resume_from_a_periodic_checkpoint_matches_the_straight_run(tmp_path):
    straight = _run("--steps", "6", "--json", "--out", str(tmp_path), "--checkpoint-every", "3")
    assert straight.exit_code == 0, straight.stderr
    assert {p.name for p in tmp_path.glob("checkpoint*.npz")} == {
        "checkpoint-000003.npz", "checkpoint-000006.npz", "checkpoint.npz"}
    rest = _run("--steps", "6", "--json", "--resume", str(tmp_path / "checkpoint-000003.npz"))
    assert rest.exit_code == 0, rest.stderr
    assert json.loads(rest.stdout)["weights_digest"] == json.loads(straight.stdout)[
        "weights_digest"]


def test_resume_with_another_run_length_is_refused(tmp_path):
    first = _run("--steps", "3", "--out", str(tmp_path), "--json")
    assert first.exit_code == 0, first.stderr
    rest = _run("--steps", "6", "--resume", str(tmp_path / "checkpoint.npz"))
    assert rest.exit_code == 1 and "is for another model: its schedule" in rest.stderr


def test_bf16_json_report_and_a_resume_in_the_other_format(tmp_path):
    """``--format bf16``: the report and settings name the format; its checkpoint resumed
    without ``--format bf16`` is refused, naming both formats."""
    result = _run("--steps", "3", "--format", "bf16", "--json", "--out", str(tmp_path))
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["format"] == report["settings"]["format"] == "bf16"
    assert report["mesh_cycles"] > 0 and report["mesh_overflows"] == 0
    assert set(report["cycles_by_pass"]) == {"forward", "delta", "gradient"}
    rest = _run("--steps", "3", "--resume", str(tmp_path / "checkpoint.npz"))
    assert rest.exit_code == 1
    assert "was trained in bf16, this run is in int16: resume with --format bf16" in rest.stderr
    again = _run("--steps", "3", "--format", "bf16", "--json", "--resume",
                 str(tmp_path / "checkpoint.npz"))
    assert again.exit_code == 0, again.stderr
    assert json.loads(again.stdout)["weights_digest"] == report["weights_digest"]


def test_human_summary_without_json():
    result = _run("--steps", "2", "--mesh", "2x2", "--hidden", "16")
    assert result.exit_code == 0, result.stderr
    assert "weights_digest" in result.stdout and "mesh_cycles" in result.stdout
    assert "int16" in result.stdout


@pytest.mark.parametrize("args, message", [
    (["--mesh", "4by4"], "mesh must be ROWSxCOLS"),
    (["--hidden", "64,x"], "must be comma-separated positive widths"),
    (["--sparsity", "1.0"], "--sparsity"),
    (["--systems", "40", "--batch", "32"], "batch (32) must give every one of the 40 systems"),
    (["--swarm", "mpi"], "'mpi' is not one of"),
    (["--checkpoint-every", "2"], "--checkpoint-every needs --out DIR"),
    (["--format", "fp8"], "'fp8' is not one of 'int16', 'bf16'"),
])
def test_bad_options_are_named(args, message):
    result = _run("--steps", "1", *args)
    assert result.exit_code == 2
    assert message in result.stderr


def test_a_corrupt_checkpoint_is_an_error_not_a_crash(tmp_path):
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"PK\x03\x04 this is not a zip archive")
    result = _run("--steps", "1", "--resume", str(bad))
    assert result.exit_code == 1
    assert "is corrupt or truncated" in result.stderr
