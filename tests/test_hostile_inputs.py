"""Hostile inputs and faults a new user meets: each ends in one line naming the problem (and the
variable or file), a non-zero exit where it is an error, nothing already stored lost and no
leftover files; and bf16 operands are rounded once, from the values as given."""

import struct
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from wse.fabric import numerics
from wse.host.cli import main
from wse.host.npyio import ArrayFileError, load_npy
from wse.host.numbers import quantise
from wse.rtl.bfloat import BFloat16

BF16 = BFloat16()
#: ``wse`` in a process of its own
WSE = [sys.executable, "-c", "from wse.host.cli import main; main()"]


def _one_error_line(result, message):
    """The CLI ``result`` failed with one ``Error:`` line holding ``message`` and no traceback."""
    assert result.exit_code != 0, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    errors = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert len(errors) == 1 and message in errors[0], result.output
    assert "Traceback" not in result.output


# -- bf16: one rounding, from the value as given ------------------------------------------------

def _bf16_of_exact(value):
    """The bf16 pattern of the exact rational ``value`` (a Python int or fractions.Fraction),
    round to nearest even, by integer arithmetic only (normal range)."""
    v = Fraction(value)
    sign = 0x8000 if v < 0 else 0
    v = abs(v)
    e = v.numerator.bit_length() - v.denominator.bit_length()
    while Fraction(2) ** e > v:
        e -= 1
    while Fraction(2) ** (e + 1) <= v:
        e += 1
    scaled = v / Fraction(2) ** (e - 7)             # 8 significant bits above the point
    q, r = divmod(scaled.numerator, scaled.denominator)
    if 2 * r > scaled.denominator or (2 * r == scaled.denominator and q & 1):
        q += 1
    if q == 256:
        q, e = 128, e + 1
    return sign | ((e + 127) << 7) | (q & 0x7F)


@pytest.mark.parametrize("value, dtype, want", [
    (1 + 2**-8 + 2**-30, np.float64, 0x3F81),       # float64 -> float32 made it a tie
    (2**31 + 2**23 + 1, np.int64, 0x4F01),          # int64 -> float32 made it a tie
    (2**63 - 1, np.int64, 0x5F00),
    (2**64 - 1, np.uint64, 0x5F80),
    (2**53 + 1, np.int64, 0x5A00),
    (-(2**62 + 2**54 + 1), np.int64, None),
    (1 + 2**-8, np.float32, 0x3F80),                # an exact tie: to even
    (1 + 2**-8 + 2**-23, np.float32, 0x3F81),
    (3 * 2.0**-134, np.float64, 0x0002),            # subnormal tie: to even
    (2.0**-134 + 2.0**-160, np.float64, 0x0001),
    ((2 - 2**-8 - 2**-30) * 2.0**127, np.float64, 0x7F7F),   # just below the overflow tie
    (1e300, np.float64, 0x7F80),
    (-1e300, np.float64, 0xFF80),
])
def test_bf16_rounds_once_from_the_value_as_given(value, dtype, want):
    if want is None:
        want = _bf16_of_exact(value)
    bits, inexact = numerics.encode(BF16, np.array([value], dtype=dtype))
    assert hex(int(bits[0])) == hex(want)
    back = float(numerics.as_float32(bits, operand=True)[0])
    exact = np.isfinite(back) and Fraction(back) == Fraction(value)
    assert inexact == (not exact)
    q, _ = quantise(BF16, np.array([[value]], dtype=dtype))
    assert hex(int(q[0, 0])) == hex(want & 0x7FFF if want == 0x8000 else want)


def test_bf16_rounds_a_longdouble_once():
    L = np.longdouble
    if np.finfo(L).nmant < 60:
        pytest.skip("long double is binary64 here")
    value = np.array([L(1) + L(2) ** -8 + L(2) ** -60])
    assert int(numerics.encode(BF16, value)[0][0]) == 0x3F81


def test_bf16_matches_an_exact_reference_on_random_float64():
    rng = np.random.default_rng(7)
    # values near bf16 ties, where a rounding through float32 goes wrong
    base = rng.integers(0x3F00, 0x4100, 400).astype(np.uint16).astype(np.uint32) << 16
    tie = (base | 0x8000).view(np.float32).astype(np.float64)
    values = tie + rng.choice([-1, 1], 400) * np.ldexp(1.0, rng.integers(-45, -26, 400)) * tie
    bits, _ = numerics.encode(BF16, values)
    assert [int(b) for b in bits] == [_bf16_of_exact(Fraction(float(v))) for v in values]


def test_bf16_beyond_float32_prints_no_numpy_warning(tmp_path):
    np.save(tmp_path / "W.npy", np.array([[1e300, 1.0]]))
    np.save(tmp_path / "X.npy", np.array([[1.0], [2.0]]))
    run = subprocess.run([*WSE, "gemm", "W.npy", "X.npy", "-o", "Y.npy", "--format", "bf16"],
                         cwd=tmp_path, capture_output=True, text=True)
    assert "RuntimeWarning" not in run.stderr and "Warning:" not in run.stderr, run.stderr
    assert "not exactly representable in bf16" in run.stdout + run.stderr
    with np.errstate(all="raise"):          # and none raised inside, either
        bits, inexact = numerics.encode(BF16, np.array([1e300, -1e39, np.inf, np.nan]))
        assert [hex(b) for b in bits] == ["0x7f80", "0xff80", "0x7f80", "0x7fc0"]
        _, beyond = quantise(BF16, np.array([1e300, -1e39, np.inf]))
        assert beyond == 2


# -- .npy headers -------------------------------------------------------------------------------

def _unclosed_header(path):
    header = b"{'descr': '<i8', 'fortran_order': False, 'shape': (2, 2, }"
    header += b" " * (118 - len(header)) + b"\n"
    path.write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header + bytes(32))
    return path


def test_an_npy_header_that_never_closes_is_named(tmp_path):
    path = _unclosed_header(tmp_path / "W.npy")
    with pytest.raises(ArrayFileError) as info:
        load_npy(path)
    assert str(path) in str(info.value) and "not a valid .npy array" in str(info.value)
    np.save(tmp_path / "X.npy", np.ones((2, 2), dtype=np.int64))
    result = CliRunner().invoke(main, ["gemm", str(path), str(tmp_path / "X.npy"),
                                       "-o", str(tmp_path / "Y.npy")])
    _one_error_line(result, "W.npy")
    assert not (tmp_path / "Y.npy").exists()


# -- X with no tokens ---------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["int16", "bf16"])
def test_x_with_no_tokens_says_so(tmp_path, fmt):
    np.save(tmp_path / "W.npy", np.ones((2, 3), dtype=np.int64))
    np.save(tmp_path / "X.npy", np.ones((3, 0), dtype=np.int64))
    result = CliRunner().invoke(main, ["gemm", str(tmp_path / "W.npy"), str(tmp_path / "X.npy"),
                                       "-o", str(tmp_path / "Y.npy"), "--format", fmt])
    _one_error_line(result, "X has 0 tokens")
    assert "do not fit" not in result.output
    assert not (tmp_path / "Y.npy").exists()


# -- --mesh ------------------------------------------------------------------------------------

@pytest.mark.parametrize("mesh, message", [
    ("99999999999999999999x1", "mesh must have at most 1024 rows, not 99999999999999999999"),
    ("3000000000x1", "mesh must have at most 1024 rows, not 3000000000"),
    ("100000x1", "mesh must have at most 1024 rows, not 100000"),
    ("2x99999999999999999999", "mesh must have at most 64 columns"),
])
@pytest.mark.parametrize("command", [["gemm", "W.npy", "X.npy", "-o", "Y.npy"], ["train"],
                                     ["export", "-o", "mesh.v"], ["bench", "gemm"]])
def test_mesh_has_an_upper_bound(tmp_path, monkeypatch, mesh, message, command):
    monkeypatch.chdir(tmp_path)
    np.save(tmp_path / "W.npy", np.ones((2, 2), dtype=np.int64))
    np.save(tmp_path / "X.npy", np.ones((2, 2), dtype=np.int64))
    result = CliRunner().invoke(main, [*command, "--mesh", mesh])
    _one_error_line(result, message)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["W.npy", "X.npy"]


# -- Ctrl-C -------------------------------------------------------------------------------------

#: A ``wse`` that sends itself SIGINT when it first imports ``module`` (so while the command line
#: is being imported, or while a command runs), deterministically.
INTERRUPT_AT = """
import os, signal, sys
class Trip:
    def find_spec(self, name, path, target=None):
        if name == {module!r}:
            os.kill(os.getpid(), signal.SIGINT)
        return None
sys.meta_path.insert(0, Trip())
from wse.host.cli import main
main({args!r})
"""


@pytest.mark.parametrize("module", ["wse.host.cli.train", "wse.runtime.golden"])
def test_ctrl_c_is_one_line(tmp_path, module):
    np.save(tmp_path / "W.npy", np.ones((2, 2), dtype=np.int64))
    np.save(tmp_path / "X.npy", np.ones((2, 2), dtype=np.int64))
    code = INTERRUPT_AT.format(module=module, args=["gemm", "W.npy", "X.npy", "-o", "Y.npy"])
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 130, run.stderr
    assert run.stderr.strip() == "Error: interrupted", run.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["W.npy", "X.npy"]


def test_ctrl_c_with_system_processes_is_one_line(tmp_path):
    import os
    import signal
    import time

    import psutil

    run = subprocess.Popen([*WSE, "train", "--swarm", "process", "--systems", "2", "--steps",
                            "100000"], cwd=tmp_path, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while len(psutil.Process(run.pid).children()) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(4)                   # the systems are answering requests
        children = psutil.Process(run.pid).children()
        assert len(children) >= 2 and run.poll() is None
        os.killpg(run.pid, signal.SIGINT)       # as a terminal's Ctrl-C does
        _, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 130, err
    lines = [line for line in err.splitlines() if not line.startswith("train ")]
    assert lines == ["Error: interrupted"], err
    time.sleep(1)
    left = [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    assert not left, [(c.pid, c.name(), c.cmdline()) for c in left]


# -- folders left by killed runs ----------------------------------------------------------------

def test_a_killed_runs_socket_folder_goes_with_the_next_run(tmp_path, monkeypatch):
    import tempfile

    from wse.runtime.compiled import SESSION_PREFIX
    from wse.runtime.wire import SOCKET_PREFIX, Rendezvous
    from wse.sim.scratch import make_folder

    env = {**__import__("os").environ, "TMPDIR": str(tmp_path)}
    code = ("import os, signal; from wse.runtime.wire import Rendezvous; r = Rendezvous(); "
            "print(r.directory, flush=True); os.kill(os.getpid(), signal.SIGKILL)")
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert run.returncode == -9
    left = Path(run.stdout.strip())
    assert left.parent == tmp_path and left.is_dir() and left.name.startswith(SOCKET_PREFIX)
    session = tmp_path / f"{SESSION_PREFIX}{run.args and 2**22 + 1}-x"   # no such process
    session.mkdir()
    alive = tmp_path / f"{SOCKET_PREFIX}{__import__('os').getppid()}-x"   # a running one's
    alive.mkdir()
    other = tmp_path / "wse-socket-notapid-x"
    other.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    r = Rendezvous()
    assert not left.exists() and alive.is_dir() and other.is_dir()
    r.close()
    folder = make_folder(SESSION_PREFIX)
    assert not session.exists()
    folder.rmdir()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([alive.name, other.name])


#: ``wse gemm`` holding a simulator's socket folder when it is sent SIGTERM.
HOLDING = """
import sys, time, contextlib
import wse.fabric.compiler, wse.fabric.tuning, wse.runtime
from wse.runtime.wire import Rendezvous

@contextlib.contextmanager
def holding(*args, **kwargs):
    r = Rendezvous()
    try:
        print(r.directory, flush=True)
        time.sleep(600)
        yield None
    finally:
        r.close()

wse.fabric.compiler.compile_gemm = lambda *a, **k: None
wse.fabric.tuning.tune_gemm = lambda *a, **k: None
wse.runtime.open_system = holding
from wse.host.cli import main
main({args!r})
"""


def test_sigterm_closes_what_the_command_holds(tmp_path):
    import os
    import signal

    np.save(tmp_path / "W.npy", np.ones((2, 2), dtype=np.int64))
    np.save(tmp_path / "X.npy", np.ones((2, 2), dtype=np.int64))
    code = HOLDING.format(args=["gemm", "W.npy", "X.npy", "-o", "Y.npy"])
    run = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           env={**os.environ, "TMPDIR": str(tmp_path)})
    try:
        folder = Path(run.stdout.readline().strip())
        assert folder.is_dir()
        run.send_signal(signal.SIGTERM)
        out, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 143, err
    assert err.strip() == "Error: terminated (SIGTERM)", err
    assert not folder.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["W.npy", "X.npy"]


def test_a_compiled_run_that_cannot_start_leaves_no_folder(tmp_path, monkeypatch):
    import tempfile

    from wse.fabric.config import MeshConfig
    from wse.runtime import compiled
    from wse.runtime.system import SimulationError
    from wse.sim import cocotb_run

    build = tmp_path / "build"
    monkeypatch.setattr(cocotb_run, "BUILD_ROOT", build)
    monkeypatch.setattr(compiled, "build_lanes_harness", _fake_harness(build, b"\x00" * 64))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    with pytest.raises(SimulationError) as info:
        compiled.CompiledSystem(MeshConfig(2, 2), engine="lanes")
    assert "cannot run the compiled simulator" in str(info.value)
    assert str(build / "mesh_harness") in str(info.value) and "\n" not in str(info.value)
    assert list(scratch.iterdir()) == []
    assert not (build / "build_seconds").exists()       # the next run rebuilds it


def _fake_harness(directory, content):
    """A ``build_lanes_harness`` whose executable holds ``content``."""
    from wse.sim.compiled import Harness

    def fake(config):
        directory.mkdir(parents=True, exist_ok=True)
        executable = directory / "mesh_harness"
        executable.write_bytes(content)
        executable.chmod(0o755)
        (directory / "build_seconds").write_text("1.0\n")
        return Harness(executable=executable, directory=directory, top="t", waves=False,
                       threads=1, hierarchical=False, build_seconds=1.0, inputs=(),
                       outputs=(), engine="lanes")
    return fake


# -- WSE_SIM_TIMEOUT ----------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["abc", "0", "nan", "-5", "inf"])
def test_a_bad_sim_timeout_is_named_when_a_simulation_starts(value, monkeypatch, tmp_path):
    import os

    from wse.fabric.config import MeshConfig
    from wse.runtime import open_system

    env = {**os.environ, "WSE_SIM_TIMEOUT": value}
    run = subprocess.run([*WSE, "--help"], env=env, capture_output=True, text=True)
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
    run = subprocess.run([sys.executable, "-c", "import wse.runtime, wse.host.train, "
                          "wse.sim.router_run, wse.sim.tile_run, wse.sim.gate_level"],
                         env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    monkeypatch.setenv("WSE_SIM_TIMEOUT", value)
    with open_system("golden", MeshConfig(1, 1)) as system:       # never reads it
        assert system is not None
    for backend in ("verilator", "verilator-cocotb"):
        with pytest.raises(ValueError) as info:
            open_system(backend, MeshConfig(1, 1))
        assert str(info.value) == (f"WSE_SIM_TIMEOUT must be a positive number of seconds, "
                                   f"not {value!r}")


# -- WSE_BUILD_DIR and the build cache ----------------------------------------------------------

@pytest.mark.parametrize("backend", ["verilator", "verilator-cocotb"])
def test_a_build_dir_under_a_file_is_named(tmp_path, monkeypatch, backend):
    from wse.fabric.config import MeshConfig
    from wse.runtime import SimulationError, open_system
    from wse.sim import cocotb_run, compiled, lanes

    (tmp_path / "file").write_text("a regular file\n")
    root = tmp_path / "file" / "build"
    monkeypatch.setenv("WSE_BUILD_DIR", str(tmp_path / "file"))
    for module in (cocotb_run, compiled):
        monkeypatch.setattr(module, "BUILD_ROOT", root)
    # a 1x1 built earlier by this worker is in the per-process cache: build it again here
    monkeypatch.setattr(cocotb_run, "BUILT", {})
    assert lanes.cocotb_run is cocotb_run
    with pytest.raises(SimulationError) as info:
        open_system(backend, MeshConfig(1, 1))
    text = str(info.value)
    assert "WSE_BUILD_DIR" in text and str(root) in text and "Not a directory" in text, text
    assert "\n" not in text
    assert (tmp_path / "file").read_text() == "a regular file\n"


def test_a_damaged_build_cache_is_rebuilt(tmp_path):
    from wse.sim.cocotb_run import cached_seconds

    executable, stamp = tmp_path / "mesh_harness", tmp_path / "build_seconds"
    assert cached_seconds(executable, stamp) is None
    executable.write_bytes(b"")
    executable.chmod(0o755)
    stamp.write_text("12.5\n")
    assert cached_seconds(executable, stamp) is None            # 0 bytes: an interrupted build
    executable.write_bytes(b"\x7fELF...")
    assert cached_seconds(executable, stamp) == 12.5
    for text in ("", "garbage", "nan", "-1", "\x00\x00"):
        stamp.write_text(text)
        assert cached_seconds(executable, stamp) is None, text
    executable.chmod(0o644)
    stamp.write_text("1\n")
    assert cached_seconds(executable, stamp) is None


@pytest.mark.parametrize("damage", [
    "empty executable",
    # the same rebuild; the damaged stamp itself is read by the unit test above
    pytest.param("corrupt build_seconds", marks=pytest.mark.slow),
])
def test_the_compiled_harness_rebuilds_a_damaged_cache(tmp_path, damage):
    """A 0-byte cached harness, or a corrupt ``build_seconds``, is built again (Verilator)."""
    import shutil

    from wse.fabric.config import MeshConfig
    from wse.sim.compiled import build_harness

    if shutil.which("verilator") is None:
        pytest.skip("needs Verilator")
    config = MeshConfig(1, 1)
    first = build_harness(config, root=tmp_path)
    stamp = first.directory / "build_seconds"
    if damage == "empty executable":
        first.executable.write_bytes(b"")
    else:
        stamp.write_text("not a number\n")
    again = build_harness(config, root=tmp_path)
    assert again.executable.stat().st_size > 0 and again.build_seconds >= 0
    assert float(stamp.read_text()) == again.build_seconds
    run = subprocess.run([str(again.executable), "--help"], capture_output=True, timeout=60)
    assert run.returncode in (0, 1, 2)          # it executes (no exec format error)


# -- a checkpoint killed mid-write --------------------------------------------------------------

KILLED_MID_WRITE = """
import os, signal, numpy as np
from wse.host import checkpoint
real = np.savez
def savez(f, **arrays):
    real(f, **arrays)
    f.flush()
    os.kill(os.getpid(), signal.SIGKILL)
np.savez = savez
checkpoint.save({path!r}, {{"step": 2}}, {{"w": np.arange(4.0)}})
"""


def test_a_checkpoint_killed_mid_write_leaves_nothing_after_the_next_save(tmp_path):
    from wse.host import checkpoint

    target = tmp_path / "checkpoint-000002.npz"
    checkpoint.save(tmp_path / "checkpoint.npz", {"step": 1}, {"w": np.zeros(4)})
    stored = (tmp_path / "checkpoint.npz").read_bytes()
    run = subprocess.run([sys.executable, "-c", KILLED_MID_WRITE.format(path=str(target))],
                         capture_output=True, text=True)
    assert run.returncode == -9, run.stderr
    left = [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert len(left) == 1 and left[0].startswith(".checkpoint-000002.npz."), left
    assert not target.exists()
    foreign = tmp_path / ".notes.npz.tmp"           # not a checkpoint's: kept
    foreign.write_text("mine\n")
    checkpoint.save(tmp_path / "checkpoint-000003.npz", {"step": 3}, {"w": np.ones(4)})
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".notes.npz.tmp", "checkpoint-000003.npz", "checkpoint.npz"]
    assert (tmp_path / "checkpoint.npz").read_bytes() == stored
    assert checkpoint.load(tmp_path / "checkpoint-000003.npz")[0] == {"step": 3}


def test_a_live_writers_temporary_file_is_kept(tmp_path):
    import os

    from wse.host import checkpoint

    live = tmp_path / f".checkpoint.npz.{os.getppid()}-abc.tmp"
    live.write_bytes(b"being written")
    checkpoint.save(tmp_path / "checkpoint.npz", {"step": 1}, {"w": np.zeros(4)})
    assert live.read_bytes() == b"being written"


def test_a_checkpoint_member_whose_header_never_closes_is_refused(tmp_path):
    import zipfile

    from wse.host import checkpoint

    good = tmp_path / "good.npz"
    checkpoint.save(good, {"step": 1}, {"w": np.zeros((2, 2))})
    bad = tmp_path / "bad.npz"
    member = _unclosed_header(tmp_path / "member.npy").read_bytes()
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(bad, "w") as dst:
        for info in src.infolist():
            dst.writestr(info.filename, member if info.filename == "w.npy" else src.read(info))
    before = bad.read_bytes()
    with pytest.raises(checkpoint.CheckpointError) as info:
        checkpoint.load(bad)
    text = str(info.value)
    assert f"checkpoint {bad}[w] is not a valid .npy array" in text and "\n" not in text
    assert bad.read_bytes() == before


# -- checkpoint counters altered and re-hashed --------------------------------------------------

@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A checkpoint after 2 of 4 steps (no --check-golden: no result compared)."""
    from wse.host.train import Trainer, TrainSettings

    path = tmp_path_factory.mktemp("ckpt") / "ckpt.npz"
    with Trainer(TrainSettings(steps=4, hidden=(16,), batch=16)) as trainer:
        for _ in range(2):
            trainer.step()
        trainer.save(path)
    return path


def _altered(saved, folder, change):
    from wse.host import checkpoint

    meta, arrays = checkpoint.load(saved)
    change(meta["extra"])
    path = folder / "altered.npz"
    checkpoint.save(path, meta, arrays)
    return path


def _counts(**counts):
    def change(extra):
        extra["counts"].update(counts)
    return change


def _golden_checks(value):
    def change(extra):
        extra["golden_checks"] = value
    return change


@pytest.mark.parametrize("change, message", [
    (_counts(mismatches=10**40), "counts.mismatches is 10000000000000000000000000000000000000000, "
                                 "beyond what any run counts"),
    (_golden_checks(10**40), "golden_checks is 10000000000000000000000000000000000000000, "
                             "beyond what any run counts"),
    (_counts(mismatches=10), "counts.mismatches is 10 but golden_checks is 0: no mesh result was "
                             "compared"),
    (_counts(mesh_overflows=2**63), "counts.mesh_overflows is 9223372036854775808, beyond"),
])
def test_altered_counters_are_refused(trained, tmp_path, change, message):
    from wse.host.checkpoint import CheckpointError
    from wse.host.train import Trainer, TrainSettings

    path = _altered(trained, tmp_path, change)
    before = path.read_bytes()
    with pytest.raises(CheckpointError) as info:
        Trainer(TrainSettings(steps=4, hidden=(16,), batch=16), resume=path)
    assert message in str(info.value) and "\n" not in str(info.value), str(info.value)
    assert path.read_bytes() == before
    result = CliRunner().invoke(main, ["train", "--steps", "4", "--hidden", "16", "--batch",
                                       "16", "--resume", str(path)])
    _one_error_line(result, message)
    assert path.read_bytes() == before


# -- wse export -o ------------------------------------------------------------------------------

def _dangling(tmp_path):
    link = tmp_path / "mesh.v"
    link.symlink_to(tmp_path / "gone" / "mesh.v")
    return link, "is a dangling symbolic link"


def _under_proc(tmp_path):
    return Path("/proc/mesh.v"), "cannot write files in /proc"


def _vlt_is_a_folder(tmp_path):
    (tmp_path / "mesh.vlt").mkdir()
    return tmp_path / "mesh.v", "mesh.vlt, written beside the Verilog, is a directory"


@pytest.mark.parametrize("where", [_dangling, _under_proc, _vlt_is_a_folder])
@pytest.mark.parametrize("command", [["export", "--mesh", "1x1"], ["export", "router"]])
def test_export_to_a_path_it_cannot_write_is_one_line(tmp_path, where, command):
    if where is _under_proc and not Path("/proc/self").exists():
        pytest.skip("no /proc here")
    output, message = where(tmp_path)
    if where is _vlt_is_a_folder and command[1] == "router":
        message = None          # the router is one file: it is written
    before = sorted(p.name for p in tmp_path.iterdir())
    result = CliRunner().invoke(main, [*command, "-o", str(output)])
    if message is None:
        assert result.exit_code == 0, result.output
        return
    _one_error_line(result, message)
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_export_reports_a_write_that_fails_late(tmp_path, monkeypatch):
    import wse.sim.export_mesh

    def failing(config, path):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(wse.sim.export_mesh, "export_mesh", failing)
    result = CliRunner().invoke(main, ["export", "--mesh", "1x1", "-o", str(tmp_path / "m.v")])
    _one_error_line(result, f"cannot write {tmp_path / 'm.v'}: Permission denied")


# -- Ray at an address where no one listens -----------------------------------------------------

def _closed_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("address", ["127.0.0.1:1", "ray://127.0.0.1:{port}", "127.0.0.1:70000"])
def test_ray_at_an_address_where_no_one_listens_fails_at_once(tmp_path, address):
    import time

    pytest.importorskip("ray")
    address = address.format(port=_closed_port())
    started = time.monotonic()
    run = subprocess.run([*WSE, "train", "--swarm", "ray", "--address", address, "--steps", "1"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert time.monotonic() - started < 60
    assert run.returncode != 0
    errors = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("Error:") and address in errors[0], \
        run.stderr
    assert "no Ray cluster" in errors[0] or "port must be in 1..65535" in errors[0]
    assert list(tmp_path.iterdir()) == []


# -- the exported mesh under stock Verilator ----------------------------------------------------

#: A cocotb test of the exported mesh: out of reset it is idle and raises no error.
STOCK_SMOKE = '''
import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge


@cocotb.test()
async def idle_after_reset(dut):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    dut.s_axis_w0_tvalid.value = 0
    dut.m_axis_s0_tready.value = 1
    await ClockCycles(dut.clk, 2)
    dut.rst.value = 0
    await ClockCycles(dut.clk, 20)
    await RisingEdge(dut.clk)
    assert int(dut.idle.value) == 1 and int(dut.error.value) == 0
'''


def test_the_exported_mesh_verilates_with_stock_flags(tmp_path):
    import yaml

    from wse.sim import toolchain

    toolchain.setup()
    result = CliRunner().invoke(main, ["export", "--mesh", "1x1", "-o",
                                       str(tmp_path / "mesh.v")])
    assert result.exit_code == 0, result.output
    # what cocotb's runner does, with no flag of the project's (the .vlt only)
    run = subprocess.run(["verilator", "--cc", "--vpi", "--public-flat-rw", "--top-module",
                          "wse_mesh", "mesh.vlt", "mesh.v", "-Mdir", "cc"], cwd=tmp_path,
                         capture_output=True, text=True)
    assert run.returncode == 0 and "%Warning" not in run.stderr, run.stderr[-3000:]
    core = yaml.safe_load((tmp_path / "mesh.core").read_text())
    sim = core["targets"]["sim"]
    assert sim["toplevel"] == "wse_mesh" and sim["filesets"] == ["rtl"]
    assert sim["tools"]["verilator"]["mode"] == "cc"
    assert "verilator_options" not in sim["tools"]["verilator"]


@pytest.mark.slow
def test_the_exported_mesh_runs_under_cocotb_with_stock_flags(tmp_path):
    import os

    from cocotb_tools.runner import get_runner

    from wse.sim import toolchain

    toolchain.setup()
    result = CliRunner().invoke(main, ["export", "--mesh", "1x1", "-o",
                                       str(tmp_path / "mesh.v")])
    assert result.exit_code == 0, result.output
    (tmp_path / "stock_smoke.py").write_text(STOCK_SMOKE)
    runner = get_runner("verilator")
    runner.build(sources=[tmp_path / "mesh.vlt", tmp_path / "mesh.v"], hdl_toplevel="wse_mesh",
                 build_dir=tmp_path / "build", timescale=("1ns", "1ps"),
                 log_file=tmp_path / "build.log")
    xml = tmp_path / "results.xml"
    runner.test(test_module="stock_smoke", hdl_toplevel="wse_mesh", test_dir=tmp_path,
                build_dir=tmp_path / "build", results_xml=str(xml),
                extra_env={"PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])},
                log_file=tmp_path / "sim.log")
    text = xml.read_text()
    assert "idle_after_reset" in text and "<failure" not in text and "<error" not in text, text
