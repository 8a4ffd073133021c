"""The router as a compiled Verilator model with C++ stream drivers, run in batches over a pipe.

:func:`build_router_harness` exports a :class:`~rtl.router.Router` as Verilog module
``wse_router`` and builds it with ``sim/harness/router_harness.cpp`` into one executable, once
per design (its Verilog, the harness's source and the build options) in a directory under
``build/sim/compiled``, guarded by a file lock like the mesh's (:mod:`sim.compiled`).
:class:`RouterHarness` runs it: each :meth:`~RouterHarness.batch` sends every input's words and
the pacing, and gets back the cycle each word was taken, what every output delivered and the
drop counter. The protocol is in the C++ file's header.
"""

import hashlib
import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import toolchain
from .cocotb_run import BUILD_ROOT, build_directory, cached_seconds, locked
from .compiled import CXXFLAGS, MAKEFLAGS, VERILATOR_ARGS
from .export import export_verilog

__all__ = ["HARNESS", "BatchResult", "RouterHarness", "build_router_harness"]

#: The C++ side: the drivers with their idle and backpressure, the batch loop, the pipe.
HARNESS = Path(__file__).with_name("harness") / "router_harness.cpp"
TOP = "wse_router"
PORTS = 5
#: Pacing is sent in millionths of the cycles.
MILLION = 1_000_000


_built = {}


def build_router_harness(router, *, root=None, jobs=None):
    """The executable of ``router``'s harness, built unless an identical build exists; and the
    seconds its build took (the recorded figure when it was cached). A process exports a design
    once (seconds of Yosys) and asks the cache on disk once."""
    root = Path(root or BUILD_ROOT)
    key = (json.dumps(router.params(), sort_keys=True), str(root.resolve()))
    if key not in _built or not _built[key][0].exists():
        _built[key] = _build(router, root, jobs)
    return _built[key]


def _build(router, root, jobs):
    toolchain.setup()
    staging = build_directory(root / "verilog") / f"{TOP}-compiled-{os.getpid()}.v"
    export_verilog(router, staging, name=TOP)
    text = staging.read_text()
    staging.unlink()
    source = HARNESS.read_text()
    digest = hashlib.sha256("\n".join([text, source, *VERILATOR_ARGS, *CXXFLAGS,
                                       *MAKEFLAGS]).encode()).hexdigest()[:12]
    directory = (root / "compiled" / f"{TOP}-{digest}").resolve()
    executable = directory / "obj_dir" / "router_harness"
    with locked(directory):
        stamp = directory / "build_seconds"
        seconds = cached_seconds(executable, stamp)
        if seconds is None:
            stamp.unlink(missing_ok=True)
            executable.unlink(missing_ok=True)
            seconds = round(_verilate(directory, text, source, jobs), 3)
            stamp.write_text(f"{seconds:.3f}\n")
    return executable, seconds


def _verilate(directory, text, source, jobs):
    started = time.monotonic()
    (directory / f"{TOP}.v").write_text(text)
    (directory / HARNESS.name).write_text(source)
    command = ["verilator", "--cc", "--exe", "--build", "-j", str(jobs or os.cpu_count() or 1),
               *VERILATOR_ARGS, "--top-module", TOP, "-o", "router_harness",
               "-CFLAGS", " ".join(CXXFLAGS),
               *(flag for variable in MAKEFLAGS for flag in ("-MAKEFLAGS", variable)),
               f"{TOP}.v", HARNESS.name]
    log = directory / "build.log"
    with open(log, "w") as out:
        done = subprocess.run(command, cwd=directory, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        tail = "\n".join(log.read_text().splitlines()[-5:])
        raise RuntimeError(f"building the router harness failed (log: {log}):\n{tail}")
    return time.monotonic() - started


@dataclass
class BatchResult:
    """What one batch did: ``taken[k]`` the cycle each word of input ``k`` was taken in
    (absolute), ``delivered[k]`` the words output ``k`` gave in order, ``drops`` the router's
    counter at the end."""
    first_cycle: int
    cycles: int
    drops: int
    taken: list
    delivered: list


class RouterHarness:
    """A running harness process (a context manager: it quits on exit)."""

    def __init__(self, executable, *, watchdog=20000):
        self._process = subprocess.Popen([str(executable), "--watchdog", str(watchdog)],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        process = self._process
        if process.poll() is None:
            try:
                process.stdin.write(np.uint64(0).tobytes())
                process.stdin.close()
            except BrokenPipeError:
                pass
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        process.stdout.close()
        process.stderr.close()

    def batch(self, streams, *, seed, offer=(1.0,) * PORTS, ready=(1.0,) * PORTS):
        """Run one batch: ``streams[k]`` the words of input ``k`` (N, E, S, W, R order);
        ``offer[k]`` the fraction of cycles a free input driver offers its next word in,
        ``ready[k]`` the fraction output ``k`` is ready in (seeded by ``seed``)."""
        header = [1, seed, *(round(f * MILLION) for f in offer),
                  *(round(f * MILLION) for f in ready)]
        parts = [np.asarray(header, dtype="<u8").tobytes()]
        for words in streams:
            words = np.asarray(words, dtype="<u8")
            parts += [np.uint64(len(words)).tobytes(), words.tobytes()]
        try:
            self._process.stdin.write(b"".join(parts))
            self._process.stdin.flush()
        except BrokenPipeError:
            raise RuntimeError(f"router harness ended: {self._stderr()}") from None
        status = self._words(1)[0]
        if status != 0:
            size = int(self._words(1)[0])
            raise RuntimeError(self._process.stdout.read(size).decode(errors="replace"))
        first, cycles, drops = (int(v) for v in self._words(3))
        taken = [self._array().astype(np.int64) for _ in range(PORTS)]
        delivered = [self._array() for _ in range(PORTS)]
        return BatchResult(first, cycles, drops, taken, delivered)

    def _array(self):
        return self._words(int(self._words(1)[0]))

    def _words(self, count):
        data = self._process.stdout.read(8 * count) if count else b""
        if len(data) != 8 * count:
            raise RuntimeError(f"router harness ended: {self._stderr()}")
        return np.frombuffer(data, dtype="<u8")

    def _stderr(self):
        self._process.wait(timeout=30)
        return self._process.stderr.read().decode(errors="replace").strip() or \
            f"exit status {self._process.returncode}"
