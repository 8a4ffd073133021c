"""Bad input to ``wse``: each case is one line naming the problem, a non-zero exit, no traceback,
no long work started (the GEMM, the trainer, the sweep are replaced by tripwires), and every file
that was there before is unchanged, with nothing new beside it.
"""

import importlib
import traceback

import numpy as np
import pytest
from click.testing import CliRunner

from wse.host.cli import main

#: What the choice options offer: each must be the registry the code dispatches on.
#: (command path, option, module, registry)
REGISTRIES = [
    (["gemm"], "--backend", "wse.runtime.backends", "BACKENDS"),
    (["gemm"], "--board", "wse.fpga.boards", "BOARDS"),
    (["build"], "--board", "wse.fpga.boards", "BOARDS"),
    (["train"], "--swarm", "wse.host.swarmx", "TRANSPORTS"),
    (["train"], "--prune", "wse.host.sparsity", "KINDS"),
    (["train"], "--optimizer", "wse.host.optim", "OPTIMIZERS"),
    (["sim", "router"], "--sim", "wse.sim.cocotb_run", "SIMULATORS"),
    (["bench", "pe"], "--sim", "wse.sim.cocotb_run", "SIMULATORS"),
]


def snapshot(folder):
    """``{relative path: bytes}`` of every file under ``folder`` (directories as ``None``)."""
    return {str(p.relative_to(folder)): None if p.is_dir() else p.read_bytes()
            for p in sorted(folder.rglob("*"))}


def fails_cleanly(args, folder, message, exit_code=None):
    """Run ``wse args``; check the failure is one ``Error:`` line holding ``message``, that no
    exception escaped, and that nothing under ``folder`` changed. Returns the result."""
    before = snapshot(folder)
    result = CliRunner().invoke(main, [str(a) for a in args])
    escaped = "".join(traceback.format_exception(*result.exc_info)) if result.exc_info else ""
    assert isinstance(result.exception, SystemExit), escaped
    assert result.exit_code != 0 if exit_code is None else result.exit_code == exit_code, \
        result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error")]
    assert len(errors) == 1 and message in errors[0], result.stderr
    assert "Traceback" not in result.output
    assert snapshot(folder) == before
    return result


@pytest.fixture
def tripwires(monkeypatch):
    """The long work of every command fails the test if it is reached."""
    def tripwire(*args, **kwargs):
        raise AssertionError("long work started before the input was checked")

    monkeypatch.setattr("wse.runtime.open_system", tripwire)
    monkeypatch.setattr("wse.host.train.Trainer", tripwire)
    monkeypatch.setattr("wse.bench.gemm.sweep_gemm", tripwire)
    monkeypatch.setattr("wse.fpga.build.build", tripwire)


@pytest.fixture
def operands(tmp_path):
    """``W.npy`` (3x4), ``X.npy`` (4x2) and an earlier ``Y.npy`` in ``tmp_path``."""
    rng = np.random.default_rng(0)
    np.save(tmp_path / "W.npy", rng.integers(-9, 9, (3, 4)))
    np.save(tmp_path / "X.npy", rng.integers(-9, 9, (4, 2)))
    np.save(tmp_path / "Y.npy", np.full((3, 2), 7, dtype=np.int16))
    (tmp_path / "file").write_text("a regular file\n")
    return tmp_path


def lying_header(path, shape):
    """A ``.npy`` at ``path`` whose header claims ``shape`` but that holds six int64s."""
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(
            f, {"descr": "<i8", "fortran_order": False, "shape": shape})
        f.write(np.arange(6, dtype=np.int64).tobytes())
    return path


def pickled(path):
    np.save(path, np.array([[1, None]], dtype=object), allow_pickle=True)
    return path


def out_of_range(path):
    np.save(path, np.full((3, 4), 40_000))
    return path


def truncated(path):
    np.save(path, np.ones((4, 4), dtype=np.int16))
    path.write_bytes(path.read_bytes()[:-5])
    return path


# case: (W path and -o from tmp_path, the message, the exit code)
GEMM_CASES = {
    "missing_directory": (lambda d: (d / "W.npy", d / "no" / "such" / "dir" / "Y.npy"),
                          "the directory", 2),
    "directory_is_a_file": (lambda d: (d / "W.npy", d / "file" / "Y.npy"),
                            "is not a directory", 2),
    "no_suffix": (lambda d: (d / "W.npy", d / "Ynoext"), "must end in .npy", 2),
    "huge_header": (lambda d: (lying_header(d / "huge.npy", (10**6, 10**6)), d / "Y.npy"),
                    "header claims a 1000000x1000000 int64 array", 2),
    "negative_shape": (lambda d: (lying_header(d / "neg.npy", (-2, -3)), d / "Y.npy"),
                       "its header claims the shape (-2, -3)", 2),
    "object_dtype": (lambda d: (pickled(d / "obj.npy"), d / "Y.npy"),
                     "holds object values", 2),
    "truncated": (lambda d: (truncated(d / "cut.npy"), d / "Y.npy"), "the file holds", 2),
    "operand_range": (lambda d: (out_of_range(d / "big.npy"), d / "Y.npy"),
                      "W must fit in the operand range of int16", 1),
}


@pytest.mark.parametrize("case", GEMM_CASES)
def test_gemm_refuses_before_running(operands, tripwires, case):
    where, message, code = GEMM_CASES[case]
    w_path, output = where(operands)
    result = fails_cleanly(["gemm", w_path, operands / "X.npy", "-o", output, "--mesh", "1x1"],
                           operands, message, code)
    if case == "missing_directory":
        assert "does not exist" in result.stderr


# (arguments after ``wse train``, message)
TRAIN_CASES = [
    (["--epochs", "2", "--steps", "3"], "--epochs and --steps are exclusive"),
    (["--steps", "0"], "'--steps': 0 is not in the range x>=1"),
    (["--steps", "-3"], "'--steps': -3 is not in the range x>=1"),
    (["--batch", "0"], "'--batch': 0 is not in the range x>=1"),
    (["--lr", "0"], "--lr must be a finite number above 0, not '0'"),
    (["--lr", "-1e-3"], "--lr must be a finite number above 0"),
    (["--lr", "nan"], "--lr must be a finite number above 0, not 'nan'"),
    (["--sparsity", "inf"], "--sparsity must be a finite number at least 0 and below 1"),
    (["--mesh", "4"], "mesh must be ROWSxCOLS"),
    (["--mesh", "0x4"], "mesh must be ROWSxCOLS"),
    (["--hidden", "0"], "must be comma-separated positive widths"),
    (["--optimizer", "rmsprop"], "'rmsprop' is not one of"),
]


@pytest.mark.parametrize("args, message", TRAIN_CASES,
                         ids=[" ".join(args) for args, _ in TRAIN_CASES])
def test_train_bad_options(tmp_path, tripwires, args, message):
    fails_cleanly(["train", *args], tmp_path, message, 2)


def test_train_out_under_a_regular_file(operands, tripwires):
    fails_cleanly(["train", "--steps", "1", "--out", operands / "file" / "run"], operands,
                  "cannot create the directory", 2)


def test_train_resume_of_a_missing_checkpoint(tmp_path, tripwires):
    fails_cleanly(["train", "--steps", "1", "--resume", tmp_path / "gone.npz"], tmp_path,
                  "does not exist", 2)


def test_train_resume_of_a_corrupt_checkpoint(tmp_path):
    (tmp_path / "bad.npz").write_bytes(b"PK\x03\x04 not a zip archive")
    fails_cleanly(["train", "--steps", "1", "--mesh", "1x1", "--hidden", "4", "--resume",
                   tmp_path / "bad.npz"], tmp_path, "is corrupt or truncated", 1)


def test_bench_sweep_out_under_a_regular_file(operands, tripwires):
    fails_cleanly(["bench", "gemm", "--backend", "golden", "--sweep", "--out",
                   operands / "file" / "plots"], operands, "cannot create the directory", 2)


def test_train_out_of_memory(tmp_path, monkeypatch):
    def run(self, **kwargs):
        raise MemoryError("Unable to allocate 8.00 TiB")

    monkeypatch.setattr("wse.host.train.Trainer.run", run)
    fails_cleanly(["train", "--steps", "1", "--mesh", "1x1", "--hidden", "4"], tmp_path,
                  "out of memory at step 1 (Unable to allocate 8.00 TiB)", 1)


def test_build_out_under_a_regular_file(operands, tripwires):
    fails_cleanly(["build", "--board", "icebreaker", "--out", operands / "file" / "b"],
                  operands, "cannot create the directory", 2)


@pytest.mark.parametrize("args, message", [
    (["bench", "gemm", "--act-sparsity", "nan"], "--act-sparsity must be a finite number"),
    (["bench", "gemm", "--backend", "board"], "'board' is not one of"),
    (["build", "--board", "icebreaker", "--clock", "0"], "--clock must be a finite number"),
])
def test_other_bad_numbers_and_choices(tmp_path, tripwires, args, message):
    fails_cleanly(args, tmp_path, message, 2)


@pytest.mark.parametrize("path, option, module, registry", REGISTRIES,
                         ids=[f"{' '.join(p)} {o}" for p, o, _, _ in REGISTRIES])
def test_choices_are_the_registries(path, option, module, registry):
    """A choice option offers exactly its registry's names, lists them in ``--help``, and names
    them when given something else."""
    names = tuple(getattr(importlib.import_module(module), registry))
    command = main
    for name in path:
        command = command.commands[name]
    param = next(p for p in command.params if option in p.opts)
    assert tuple(param.type.choices) == names
    help_text = CliRunner().invoke(main, [*path, "--help"]).output
    assert f"[{'|'.join(names)}]" in "".join(help_text.split())
    result = CliRunner().invoke(main, [*path, option, "no-such-thing"])
    assert result.exit_code == 2
    assert all(repr(name) in result.stderr for name in names), result.stderr


@pytest.mark.parametrize("option, value", [("--board", "icebreaker"), ("--port", "loop://"),
                                           ("--baud", "9600"), ("--timeout", "2")])
def test_gemm_board_options_without_the_board_backend(operands, tripwires, option, value):
    fails_cleanly(["gemm", operands / "W.npy", operands / "X.npy", "-o", operands / "Y.npy",
                   option, value], operands, f"{option} is for --backend board, not golden", 2)


def test_train_address_without_ray(tmp_path, tripwires):
    fails_cleanly(["train", "--steps", "1", "--address", "10.0.0.1:6379"], tmp_path,
                  "--address joins a Ray cluster: it needs --swarm ray, not --swarm inproc", 2)
