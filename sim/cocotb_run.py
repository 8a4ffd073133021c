"""Build an Amaranth component for a simulator and run cocotb testbenches on it.

One call site for ``cocotb_tools.runner`` in the project. Each distinct design (its Verilog
text), simulator and waveform setting gets its own build directory, shared by every test that
needs it and guarded by a file lock, so pytest-xdist workers never link into one directory at
the same time; every run gets its own test directory and results file.
"""

import fcntl
import hashlib
import json
import math
import os
import re
import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from xml.etree import ElementTree

from . import toolchain
from .export import export_verilog

__all__ = ["SIMULATORS", "BUILD_ROOT", "TIMESCALE", "BUILT", "DEFAULT_TIMEOUT", "COVERAGE_ARGS",
           "Build", "Result", "build", "build_once", "build_directory", "cached_seconds",
           "coverage_enabled", "default_timeout", "forget_build", "locked", "run"]


SIMULATORS = ("verilator", "icarus")
BUILD_ROOT = Path(os.environ.get("WSE_BUILD_DIR", "build")) / "sim"

_VERILATOR_ARGS = ["-Wno-fatal", "-Wno-WIDTHEXPAND", "-Wno-WIDTHTRUNC", "-Wno-UNOPTFLAT"]
#: The simulators' time unit and precision (every build and run, the gate-level one too).
TIMESCALE = ("1ns", "1ps")
#: Wall-clock seconds a simulation may take when ``WSE_SIM_TIMEOUT`` is not set.
DEFAULT_TIMEOUT = 900.0
#: What a Verilator build adds when :func:`coverage_enabled` (``sim/coverage.py`` reads the
#: ``.dat`` files its runs write).
COVERAGE_ARGS = ["--coverage-line", "--coverage-toggle"]


def coverage_enabled():
    """Whether Verilator builds record line and toggle coverage: ``WSE_COVERAGE`` set to
    anything but ``0`` (``make coverage`` sets it). Such a build exports its Verilog with the
    Amaranth source lines (``src`` attributes), and each of its runs writes a ``coverage-*.dat``
    into its run directory."""
    return os.environ.get("WSE_COVERAGE", "0").strip() not in ("", "0")


def default_timeout():
    """Wall-clock seconds a simulation may take: ``WSE_SIM_TIMEOUT`` if set, else
    :data:`DEFAULT_TIMEOUT`. Read when a simulation starts, never at import (a command that
    runs none never reads it); anything but a positive finite number is a ``ValueError`` that
    names the variable."""
    text = os.environ.get("WSE_SIM_TIMEOUT")
    if text is None or not text.strip():
        return DEFAULT_TIMEOUT
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"WSE_SIM_TIMEOUT must be a positive number of seconds, not {text!r}")
    return seconds


def build_directory(directory):
    """Create ``directory`` (with its parents) for a build, or raise ``RuntimeError`` naming it
    and ``WSE_BUILD_DIR`` (the root of every build: :data:`BUILD_ROOT`)."""
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        where = os.environ.get("WSE_BUILD_DIR")
        root = f"WSE_BUILD_DIR={where!r}" if where is not None else "the build root (WSE_BUILD_DIR)"
        raise RuntimeError(f"cannot create the build directory {directory} under {root}: "
                           f"{error.strerror or error}") from None
    return directory


def cached_seconds(executable, stamp):
    """The seconds a finished build of ``executable`` took, recorded in the file ``stamp``; or
    ``None`` when it must be built (again): either file missing, the executable empty or not
    executable, or the stamp not a non-negative number (a build interrupted or damaged)."""
    try:
        if executable.stat().st_size == 0 or not os.access(executable, os.X_OK):
            return None
        seconds = float(stamp.read_text())
    except (OSError, ValueError):
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def forget_build(directory):
    """Make the next use of the build in ``directory`` build it again (its executable could
    not run): its ``build_seconds`` stamp goes."""
    (Path(directory) / "build_seconds").unlink(missing_ok=True)


@dataclass(frozen=True)
class Build:
    """A design built for one simulator."""
    sim: str
    top: str
    directory: Path
    verilog: Path
    waves: bool
    coverage: bool = False


@dataclass
class Result:
    """What one simulator run reported."""
    tests: int
    failed: int
    results_xml: Path
    test_dir: Path
    waves: Path | None = None
    failures: dict = field(default_factory=dict)   # test name -> failure message

    @property
    def passed(self):
        return self.tests > 0 and self.failed == 0


def _check_sim(sim):
    if sim not in SIMULATORS:
        raise ValueError(f"Simulator must be one of {', '.join(SIMULATORS)}, not {sim!r}")


@contextmanager
def locked(directory):
    """Hold an exclusive file lock on ``directory`` (created if missing) for the block."""
    build_directory(directory)
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


_TRIGGER = re.compile(r"^(\s*)reg (\\\S*dump_module\S*)\s+= 0;$", re.MULTILINE)


def _icarus_time_zero(text):
    """Icarus never runs an ``always @*`` block whose inputs do not change after time 0, so
    Amaranth's constant-driven comb logic stays X there (amaranth-lang/amaranth#1629). Yosys
    already reads a per-module trigger register in every such block; flip it once after the
    always blocks are waiting (``#0``), so each block runs at time 0. (``always_comb`` would run
    too, but Icarus 11 then widens constant bit-selects into zero-delay loops.)"""
    return _TRIGGER.sub(lambda m: f"{m[0]}\n{m[1]}initial #0 {m[2]} = 1'b1;", text)


def build(component, *, top, sim="verilator", waves=False, root=None, ports_only=False):
    """Export ``component`` as Verilog module ``top`` and build it for ``sim``.

    ``ports_only``: the testbench touches only the top module's ports, so Verilator need not
    make every internal signal visible to VPI (cocotb's default ``--public-flat-rw``), which
    keeps it free to optimise: a 4x4 mesh compiles in a fraction of the time.
    """
    _check_sim(sim)
    toolchain.setup()
    from cocotb_tools.runner import get_runner

    root = Path(root or BUILD_ROOT)
    coverage = sim == "verilator" and coverage_enabled()
    staging = build_directory(root / "verilog") / f"{top}-{os.getpid()}.v"
    export_verilog(component, staging, name=top, emit_src=coverage)
    text = staging.read_text()
    if sim == "icarus":
        text = _icarus_time_zero(text)
    args = list(_VERILATOR_ARGS) if sim == "verilator" else []
    if ports_only and sim == "verilator":
        args += ["--no-public-flat-rw", "--public-depth", "1"]
    if waves and sim == "verilator":
        args += ["--trace-fst", "--trace-structs"]
    if coverage:
        args += COVERAGE_ARGS
    digest = hashlib.sha256("\n".join([text, *args]).encode()).hexdigest()[:12]
    directory = (root / sim / f"{top}-{digest}{'-waves' if waves else ''}").resolve()
    verilog = directory / f"{top}.v"
    with locked(directory):
        if not verilog.exists() or verilog.read_text() != text:
            verilog.write_text(text)
        staging.unlink()
        runner = get_runner(sim)
        runner.build(sources=[verilog], hdl_toplevel=top, build_dir=directory,
                     build_args=args, timescale=TIMESCALE, waves=waves,
                     log_file=directory / "build.log")
    return Build(sim=sim, top=top, directory=directory, verilog=verilog, waves=waves,
                 coverage=coverage)


#: The builds :func:`build_once` made in this process, by design: it does not build those again.
BUILT = {}


def build_once(make_component, *, key, top, sim="verilator", waves=False, ports_only=False):
    """:func:`build` ``make_component()`` unless this process already built ``key`` (a
    hashable description of the design, such as its parameters as JSON) for ``sim``."""
    index = (key, top, sim, waves, ports_only, sim == "verilator" and coverage_enabled())
    if index not in BUILT:
        BUILT[index] = build(make_component(), top=top, sim=sim, waves=waves,
                             ports_only=ports_only)
    return BUILT[index]


def run(built, *, module, testcase=None, params=None, name=None, seed=None, extra_env=None,
        timeout=None):
    """Run cocotb ``module`` (optionally only ``testcase``) on a :class:`Build`.

    ``params`` reaches the testbench as JSON in ``WSE_PARAMS``. Returns a :class:`Result`;
    a run that crashed before writing its results counts as one failed test, and so does one
    still running after ``timeout`` seconds of wall-clock time (its simulator is killed: the
    testbenches' own watchdogs bound simulated time, this bounds a simulator stuck in a
    zero-delay loop; ``None``: :func:`default_timeout`).
    """
    timeout = default_timeout() if timeout is None else timeout
    toolchain.setup()
    from cocotb_tools.runner import get_runner

    label = name or (testcase if isinstance(testcase, str) else module.rsplit(".", 1)[-1])
    test_dir = (built.directory / "runs" / f"{label}-{os.getpid()}").resolve()
    test_dir.mkdir(parents=True, exist_ok=True)
    results_xml = test_dir / "results.xml"
    results_xml.unlink(missing_ok=True)
    env = {"WSE_PARAMS": json.dumps(params or {}), "COCOTB_RESULTS_FILE": str(results_xml)}
    env.update(extra_env or {})
    runner = get_runner(built.sim)
    plusargs = []
    if built.coverage:      # one file per run: a later run in the same directory adds its own
        plusargs.append(f"+verilator+coverage+file+{test_dir / f'coverage-{time.time_ns()}.dat'}")
    test_filter = None if testcase is None else rf"(^|\.){re.escape(testcase)}(/|$)"
    with _deadline(timeout, test_dir) as expired:
        try:
            runner.test(test_module=module, hdl_toplevel=built.top, hdl_toplevel_lang="verilog",
                        test_filter=test_filter, build_dir=built.directory, test_dir=test_dir,
                        results_xml=str(results_xml), extra_env=env, waves=built.waves,
                        plusargs=plusargs,
                        seed=seed, timescale=TIMESCALE, log_file=test_dir / "sim.log")
        except SystemExit:  # the runner exits on failures under pytest; the results say which
            pass
        except RuntimeError:    # the simulator died (or was killed below): reported from here
            if not expired() and not results_xml.is_file():
                raise
    if expired():
        return Result(tests=1, failed=1, results_xml=results_xml, test_dir=test_dir,
                      failures={"simulation": f"killed after {timeout} s of wall-clock time "
                                              f"(a zero-delay loop or a hang in the simulator); "
                                              f"see {test_dir / 'sim.log'}"})
    result = _read_results(results_xml, test_dir)
    if built.waves:
        icarus_dump = built.directory / f"{built.top}.fst"     # Icarus writes beside its build
        if icarus_dump.exists():
            icarus_dump.replace(test_dir / icarus_dump.name)
        candidates = [test_dir / "dump.fst", test_dir / icarus_dump.name]
        result.waves = next((p for p in candidates if p.exists()), None)
    return result


@contextmanager
def _deadline(seconds, workdir=None):
    """Kill the simulator if the block outlasts ``seconds``: this process's child processes
    working in ``workdir`` (a run's own directory, so two simulations in one process do not take
    each other down), or every child process if none is found there."""
    fired = threading.Event()

    def children():
        me = os.getpid()
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) == me:
                    yield int(stat.parent.name)
            except (OSError, IndexError, ValueError):
                continue

    def working_in(pid):
        try:
            return workdir is not None and Path(os.readlink(f"/proc/{pid}/cwd")) == workdir
        except OSError:
            return False

    def kill_children():
        fired.set()
        pids = list(children())
        mine = [pid for pid in pids if working_in(pid)]
        for pid in mine or pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                continue

    timer = threading.Timer(seconds, kill_children)
    timer.daemon = True
    timer.start()
    try:
        yield fired.is_set
    finally:
        timer.cancel()


def _read_results(results_xml, test_dir):
    if not results_xml.is_file():
        return Result(tests=1, failed=1, results_xml=results_xml, test_dir=test_dir,
                      failures={"simulation": f"terminated without results; see "
                                              f"{test_dir / 'sim.log'}"})
    tests = failed = 0
    failures = {}
    for case in ElementTree.parse(results_xml).getroot().iter("testcase"):
        tests += 1
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        if problem is not None:
            failed += 1
            failures[case.get("name")] = problem.get("message") or (problem.text or "").strip()
    return Result(tests=tests, failed=failed, results_xml=results_xml, test_dir=test_dir,
                  failures=failures)
