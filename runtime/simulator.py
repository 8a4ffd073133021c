"""The ``verilator`` and ``icarus`` backends: the mesh's RTL in a simulator under cocotb.

:class:`CocotbSystem` builds the mesh (once per process and design), starts the simulator on a
thread with the cocotb test :mod:`wse.tb.mesh_server`, and sends it one request per exchange
over a Unix socket (:mod:`wse.runtime.wire`); the simulation keeps the mesh's state from call
to call. Protocol, one JSON object each way:

- ``{"op": "exchange", "streams": {"s_axis_w<row>": [words]}}`` is answered with
  ``{"ok": true, "received": {port: [words]}, "cycles": n, "error": 0|1, "overflow": 0|1}``,
  or with ``{"ok": false, "message": ...}`` when the testbench failed (a stuck mesh, a broken
  stream rule), after which the simulation ends;
- ``{"op": "quit"}`` ends the simulation.
"""

import contextlib
import json
import os
import threading

from wse.fabric.mesh import AxiStreamMesh
from wse.rtl.validate import count, number
from wse.sim.cocotb_run import SIMULATORS, build_once, default_timeout, run

from .system import RESET_CYCLES, SimulationError, System
from .wire import MAX_MESSAGE_BYTES, ChannelClosed, Rendezvous, exchange_reply

__all__ = ["CocotbSystem"]

#: Seconds :meth:`CocotbSystem.close` waits for the simulator to end after it was told to.
CLOSE_WAIT = 120.0


class CocotbSystem(System):
    """The RTL of the mesh of ``config`` in simulator ``sim`` (``"verilator"`` or
    ``"icarus"``), one simulator process that keeps its state from call to call.

    Every wait is bounded, and a fault of the simulator or of the socket (silence, a hang-up,
    a malformed reply) comes back as a one-line :class:`SimulationError`; so does a failed
    testbench, with its own message (a stuck mesh names its ports, one a line). The socket's
    temporary folder goes on :meth:`close`.

    Parameters
    ----------
    sim : str
        One of :data:`sim.cocotb_run.SIMULATORS`.
    waves : bool
        Record a waveform (its path is in ``result.waves`` once closed).
    timeout : float
        Wall-clock seconds for the whole session; the simulator is killed after them.
    watchdog : int
        Simulated cycles without movement after which the testbench declares the mesh stuck.
    reset_cycles : int
        Rising edges of ``clk`` with ``rst`` held high at the start (``docs/mesh.md``: one is
        enough).
    connect_timeout : float
        Seconds the simulator has to start and connect (after the build).
    reply_timeout : float or None
        Seconds an exchange may take, from the request to the whole reply; by default
        ``WSE_SIM_TIMEOUT`` (:func:`sim.cocotb_run.default_timeout`, 900 s unless set). A big
        program on a big mesh may need more.
    max_message_bytes : int
        The longest reply accepted (and request sent).

    Members
    -------
    result : sim.cocotb_run.Result or None
        The simulator run's result, once it ended.
    """

    def __init__(self, config=None, *, sim="verilator", waves=False, timeout=6 * 3600,
                 watchdog=5000, connect_timeout=1800, reply_timeout=None,
                 max_message_bytes=MAX_MESSAGE_BYTES, reset_cycles=RESET_CYCLES):
        super().__init__(config)
        if sim not in SIMULATORS:
            raise ValueError(f"sim must be one of {', '.join(SIMULATORS)}, not {sim!r}")
        self.backend = sim
        self.timeout = number("timeout", timeout, 0, open_lo=True)
        self.watchdog = count("watchdog", watchdog)
        self.reset_cycles = count("reset_cycles", reset_cycles)
        connect_timeout = number("connect_timeout", connect_timeout, 0, open_lo=True)
        self.reply_timeout = number("reply_timeout", default_timeout() if reply_timeout is None
                                    else reply_timeout, 0, open_lo=True)
        max_message_bytes = count("max_message_bytes", max_message_bytes)
        self.result = None
        self._crash = None
        self._ended = False
        self._channel = None
        self._peer = f"the {sim} simulation"
        try:
            self.built = self._build(waves)
        except RuntimeError as error:       # a failed build names its log or its folder
            raise SimulationError(str(error)) from None
        self._rendezvous = Rendezvous()
        params = {"config": self.config.to_dict(), "socket": self._rendezvous.address,
                  "watchdog": self.watchdog, "timeout": self.timeout,
                  "max_bytes": max_message_bytes, "reset_cycles": self.reset_cycles}
        self._thread = threading.Thread(target=self._serve, args=(params,), daemon=True,
                                        name=f"wse-{sim}")
        try:
            self._thread.start()
            self._channel = self._rendezvous.accept(
                connect_timeout, gone=self._gone, peer=self._peer, timeout=self.reply_timeout,
                max_bytes=max_message_bytes)
        except BaseException:
            self._rendezvous.close()
            raise

    # The simulator, on its thread -------------------------------------------------------------

    def _build(self, waves):
        """The mesh built for the simulator (:class:`sim.cocotb_run.Build`)."""
        cfg = self.config
        return build_once(lambda: AxiStreamMesh(cfg), key=json.dumps(cfg.to_dict(), sort_keys=True),
                          top=f"wse_mesh_{cfg.rows}x{cfg.cols}", sim=self.backend, waves=waves,
                          ports_only=True)

    def _simulate(self, params):
        """Run the simulator with ``params`` until it ends; its :class:`sim.cocotb_run.Result`."""
        return run(self.built, module="wse.tb.mesh_server", params=params,
                   name=f"serve-{os.getpid()}-{id(self):x}", timeout=self.timeout)

    def _serve(self, params):
        try:
            self.result = self._simulate(params)
        except Exception as e:      # reported by the calls that find the simulator gone
            self._crash = e
        finally:
            self._ended = True
            self._rendezvous.wake()     # a wait for it to connect is over

    def _gone(self):
        if self._ended:
            return f"{self._peer} ended before it connected: {self._failure()}"
        return None

    def _failure(self):
        if self._crash is not None:
            return f"{type(self._crash).__name__}: {self._crash}"
        if self.result is None:
            return "no result"
        messages = "; ".join(f"{k}: {v}" for k, v in self.result.failures.items())
        return f"{messages or 'failed'} (log: {self.result.test_dir / 'sim.log'})"

    # The System's primitive -------------------------------------------------------------------

    def _exchange(self, streams):
        channel = self._channel
        if channel is None or channel.closed:
            raise SimulationError(f"this System is closed ({self._peer} is gone)")
        try:
            channel.send({"op": "exchange", "streams": {
                f"s_axis_w{r}": words for r, words in streams.items()}})
            reply = exchange_reply(channel.receive(self.reply_timeout), self._peer,
                                   self.config.cols)
        except ChannelClosed:
            self._thread.join(timeout=CLOSE_WAIT)      # its result says why
            message = f"{self._peer} ended: {self._failure()}"
            self._abandon()
            raise SimulationError(message) from None
        except SimulationError:
            self._abandon()
            raise
        if isinstance(reply, str):          # the testbench failed, and ends
            self.close(check=False)
            raise SimulationError(reply)
        return reply

    def _abandon(self):
        """After a fault: drop the socket and its folder and leave the simulator to end on its
        own (it finds the socket gone); :meth:`close` then has nothing left to do."""
        channel, self._channel = self._channel, None
        if channel is not None:
            channel.close()
            self._rendezvous.close()

    @property
    def socket_folder(self):
        """The socket's temporary folder (readable by this user only; gone after :meth:`close`)."""
        return self._rendezvous.directory

    def close(self, check=True):
        """End the simulation and remove its socket's folder; with ``check``, a testbench that
        failed raises :class:`SimulationError`. Nothing to do once an exchange has failed
        (that failure was the report)."""
        channel, self._channel = self._channel, None
        if channel is None:
            return
        if not channel.closed:
            with contextlib.suppress(SimulationError):
                channel.send({"op": "quit"})
        channel.close()
        self._rendezvous.close()
        self._thread.join(timeout=CLOSE_WAIT)
        if not check:
            return
        if self._thread.is_alive():
            raise SimulationError(f"{self._peer} did not end within {CLOSE_WAIT:g} s of being "
                                  f"closed; it is killed at the end of its {self.timeout:g} s "
                                  f"session")
        if self.result is None or not self.result.passed:
            raise SimulationError(f"the {self.backend} testbench failed: {self._failure()}")
