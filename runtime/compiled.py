"""The ``verilator`` backend: the mesh's RTL as a compiled model, whole exchanges in C++.

:class:`CompiledSystem` builds the mesh with its C++ stream drivers (once per design, cached on
disk) as one of two models: the lanes model (:mod:`wse.sim.lanes`: every tile one lane of the
same vector instructions, the default) or Verilator's (:mod:`wse.sim.compiled`), starts the
executable and feeds it each exchange's streams in bulk through a pipe; the simulator runs the
exchange to the end without Python and sends back what left the outlets, the cycles and the
sticky flags. Cycle for cycle it is the cocotb path
(:mod:`wse.runtime.simulator`, backend ``verilator-cocotb``), which stays for the testbenches
and for debugging. Protocol and design: ``docs/sim.md``.
"""

import os
import select
import shutil
import struct
import subprocess
import time
from pathlib import Path

from wse.rtl.validate import count, number
from wse.sim.cocotb_run import default_timeout, forget_build
from wse.sim.compiled import build_harness
from wse.sim.lanes import build_lanes_harness
from wse.sim.scratch import make_folder

from .system import RESET_CYCLES, SimulationError, System
from .wire import exchange_reply

__all__ = ["CompiledSystem"]

_WORD = struct.Struct("<Q")
#: The sessions' folders' prefix in the temporary directory (``<prefix><pid>-<random>``).
SESSION_PREFIX = "wse-compiled-"
#: Seconds :meth:`CompiledSystem.close` waits for the simulator to end after ``quit``.
CLOSE_WAIT = 30.0


#: The models :class:`CompiledSystem` can run.
ENGINES = ("lanes", "verilator")
#: By default, meshes of more tiles than this run as lanes: the lanes model costs about the same
#: per cycle for 1 to 16 tiles, Verilator's grows with each (about equal at two tiles, the lanes
#: model 1.7 times faster at three and four: ``docs/sim.md``).
LANES_ABOVE = 2


class CompiledSystem(System):
    """The RTL of the mesh of ``config`` as a compiled model in its own process, which keeps
    its state from call to call.

    Parameters
    ----------
    engine : str or None
        ``"lanes"``: the tile's netlist as vector code, every tile a lane (:mod:`sim.lanes`;
        no waveforms, no threads); ``"verilator"``: the Verilated mesh (:mod:`sim.compiled`).
        Both give the same results in the same cycles. ``None``: lanes for meshes of more than
        :data:`LANES_ABOVE` tiles unless ``waves``, ``threads`` or ``hierarchical`` ask for
        Verilator.
    waves : bool or path
        Record an FST waveform of the whole session (``True``: ``waves.fst`` in the session's
        folder); its path is :attr:`waves`.
    watchdog : int
        Simulated cycles without movement on any port after which the mesh is declared stuck
        (the message names each input still offering, and its color).
    reset_cycles : int
        Rising edges with ``rst`` high at the start.
    reply_timeout : float or None
        Wall-clock seconds an exchange may take (``WSE_SIM_TIMEOUT``, 900 s, by default).
    threads : int
        Verilator's ``--threads`` for the model (a separate build; Verilator only).
    hierarchical : bool or None
        Verilator only: build the tile once as a hierarchical block: seconds to build whatever
        the mesh's size, about four times slower to run. ``None``: for meshes of more than
        :data:`sim.compiled.HIERARCHICAL_ABOVE` tiles.

    Members
    -------
    harness : sim.compiled.Harness
        The build (its ``build_seconds``).
    loop_seconds : float
        Wall-clock seconds spent inside the simulator's cycle loop over all exchanges (the
        free-running figure: inputs already in C++, no pipe, no Python).
    """

    backend = "verilator"

    def __init__(self, config=None, *, engine=None, waves=False, watchdog=5000,
                 reset_cycles=RESET_CYCLES, reply_timeout=None, threads=1, hierarchical=None):
        super().__init__(config)
        verilator_only = [name for name, asked in (("waves", bool(waves)), ("threads",
                          threads != 1), ("hierarchical", hierarchical is not None)) if asked]
        if engine is None:
            small = self.config.rows * self.config.cols <= LANES_ABOVE
            engine = "verilator" if verilator_only or small else "lanes"
        if engine not in ENGINES:
            raise ValueError(f"engine must be one of {', '.join(ENGINES)}, not {engine!r}")
        if engine == "lanes" and verilator_only:
            raise ValueError(f"{verilator_only[0]} needs engine='verilator' (the lanes model "
                             f"has none)")
        self.watchdog = count("watchdog", watchdog)
        self.reset_cycles = count("reset_cycles", reset_cycles)
        self.reply_timeout = number("reply_timeout", default_timeout() if reply_timeout is None
                                    else reply_timeout, 0, open_lo=True)
        self.loop_seconds = 0.0
        try:
            if engine == "lanes":
                self.harness = build_lanes_harness(self.config)
            else:
                self.harness = build_harness(self.config, waves=bool(waves), threads=threads,
                                             hierarchical=hierarchical)
        except RuntimeError as error:       # a failed build names its log
            raise SimulationError(str(error)) from None
        self._folder = make_folder(SESSION_PREFIX)
        self.waves = None
        command = [str(self.harness.executable), "--reset-cycles", str(self.reset_cycles),
                   "--watchdog", str(self.watchdog)]
        if waves:
            self.waves = (self._folder / "waves.fst" if isinstance(waves, bool)
                          else Path(waves).resolve())
            command += ["--waves", str(self.waves)]
        self._log = self._folder / "sim.log"
        self._process = None
        try:
            with open(self._log, "w") as log:
                self._process = subprocess.Popen(command, stdin=subprocess.PIPE,
                                                 stdout=subprocess.PIPE, stderr=log,
                                                 cwd=self._folder)
        except OSError as error:            # a damaged build: the next one rebuilds it
            self._tidy()
            forget_build(self.harness.directory)
            raise SimulationError(f"cannot run the compiled simulator "
                                  f"{self.harness.executable}: {error.strerror or error} "
                                  f"(its build is discarded: the next run rebuilds it)"
                                  ) from None
        except BaseException:
            self._tidy()
            raise
        self._peer = f"the compiled {engine} simulation"

    # The System's primitive -------------------------------------------------------------------

    def _exchange(self, streams):
        process = self._process
        if process is None:
            raise SimulationError(f"this System is closed ({self._peer} is gone)")
        request = [_WORD.pack(1)]
        for name in self.harness.inputs:
            words = streams.get(int(name[len("s_axis_w"):]), []) if name.startswith(
                "s_axis_w") else []
            request.append(_WORD.pack(len(words)))
            if words:
                request.append(struct.pack(f"<{len(words)}Q", *words))
        try:
            process.stdin.write(b"".join(request))
            process.stdin.flush()
            deadline = time.monotonic() + self.reply_timeout
            status = self._read_word(deadline)
            if status != 0:
                message = self._read(self._read_word(deadline), deadline).decode(errors="replace")
                self._end()
                raise SimulationError(message)
            cycles, error, overflow, nanoseconds = (self._read_word(deadline) for _ in range(4))
            received = {}
            for name in self.harness.outputs:
                n = self._read_word(deadline)
                received[name] = list(struct.unpack(f"<{n}Q", self._read(8 * n, deadline)))
        except (BrokenPipeError, EOFError):
            message = f"{self._peer} ended: {self._failure()}"
            self._end()
            raise SimulationError(message) from None
        except TimeoutError:
            self._end()
            raise SimulationError(f"{self._peer} did not answer within {self.reply_timeout:g} s "
                                  f"(raise reply_timeout or WSE_SIM_TIMEOUT for a big program)"
                                  ) from None
        self.loop_seconds += nanoseconds / 1e9
        return exchange_reply({"ok": True, "received": received, "cycles": cycles, "error": error,
                       "overflow": overflow}, self._peer, self.config.cols)

    def _read(self, n, deadline):
        out = self._process.stdout
        chunks, left = [], n
        while left:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([out], [], [], wait)[0]:
                raise TimeoutError
            chunk = os.read(out.fileno(), left)
            if not chunk:
                raise EOFError
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def _read_word(self, deadline):
        return _WORD.unpack(self._read(8, deadline))[0]

    def _failure(self):
        process = self._process
        try:
            code = process.wait(timeout=CLOSE_WAIT)
        except subprocess.TimeoutExpired:
            return "still running"
        text = self._log.read_text(errors="replace").strip() if self._log.exists() else ""
        return f"exit status {code}" + (f": {text.splitlines()[-1]}" if text else "")

    def _end(self):
        """Stop the simulator (after a fault): nothing is left for :meth:`close`."""
        process, self._process = self._process, None
        if process is not None:
            process.kill()
            process.wait()
            for stream in (process.stdin, process.stdout):
                try:
                    stream.close()
                except BrokenPipeError:     # stdin's unsent request: the simulator is gone
                    pass
            self._tidy()

    @property
    def pid(self):
        """The simulator process's id (``None`` once closed)."""
        return None if self._process is None else self._process.pid

    def close(self):
        """End the simulation (the waveform, if any, is complete afterwards)."""
        process, self._process = self._process, None
        if process is None:
            return
        try:
            process.stdin.write(_WORD.pack(0))
            process.stdin.close()
            process.wait(timeout=CLOSE_WAIT)
        except (BrokenPipeError, subprocess.TimeoutExpired):
            process.kill()
            process.wait()
        finally:
            process.stdout.close()
            self._tidy()

    def _tidy(self):
        """Remove the session's folder unless it holds the waveform."""
        if self.waves is None or self.waves.parent != self._folder:
            shutil.rmtree(self._folder, ignore_errors=True)
