"""The ``board`` backend: a mesh on an FPGA behind the serial bridge (``fpga/bridge.py``).

:class:`BoardSystem` is a :class:`~runtime.system.System` whose one primitive, ``_exchange``, speaks
the bridge's frames (:mod:`fpga.serial_frames`, ``docs/bridge.md``) over pyserial: every
wavelet goes out as a checksummed frame to its row, paced by the bridge's credits; a status
request ends the exchange, and the outlet frames and the status reply come back. ``port`` is a
device (``/dev/ttyUSB1``) or any pyserial URL (``socket://127.0.0.1:5000`` for the simulated
bridge of ``tb/bridge_tb.py``).
"""

import time
from collections import deque

from wse.fpga import serial_frames as sf
from wse.rtl.validate import integer, number

from .system import Exchange, SimulationError, System

__all__ = ["BoardError", "BoardSystem"]

_POLL = 0.05     # seconds a blocking read waits before it looks at the clock again


class BoardError(SimulationError):
    """The board or its link failed: no reply in time, a reply that fails its checksum, or
    frames the bridge counted as bad. ``exchange`` holds what the exchange returned when the
    bridge did answer (its outlets and status), else ``None``."""

    def __init__(self, message, exchange=None):
        super().__init__(message)
        self.exchange = exchange


class BoardSystem(System):
    """The mesh of ``config`` on a board, through its serial bridge on ``port`` at ``baud``.

    ``timeout`` (seconds) bounds every wait for the bridge; ``fifo_depth`` must be the bridge's
    (its intake FIFOs: the host's credit per row). Opening sends a status request, so the
    exchange counters start from here and bad frames from before are not this System's.
    """

    backend = "board"

    def __init__(self, config=None, *, port, baud=115_200, timeout=5.0,
                 fifo_depth=sf.DEFAULT_FIFO_DEPTH):
        super().__init__(config)
        baud = integer("baud", baud, 1)
        timeout = number("timeout", timeout, 0, open_lo=True)
        fifo_depth = integer("fifo_depth", fifo_depth, 2, 256)
        if self.config.rows > sf.MAX_PORTS or self.config.cols > sf.MAX_PORTS:
            raise ValueError(f"the bridge addresses at most {sf.MAX_PORTS} rows and columns")
        import serial

        self.port, self.baud, self.timeout, self.fifo_depth = port, baud, timeout, fifo_depth
        try:
            self._serial = serial.serial_for_url(port, baudrate=baud, timeout=_POLL,
                                                 write_timeout=self.timeout)
        except (serial.SerialException, ValueError) as e:
            raise BoardError(f"cannot open the serial port {port!r}: {e}") from e
        self._decoder = sf.ReplyDecoder()
        self.bad_frames = 0          # bad frames the bridge had counted at the last status
        self.frames_sent = 0
        self.credit_waits = 0        # times the host stopped because no row had credit left
        self.last_status = None
        try:
            self._serial.reset_input_buffer()
            self.bad_frames = self._open_status().bad_frames
        except BaseException:
            self.close()
            raise

    def _open_status(self):
        """A status round trip. A bridge left mid-frame (a host that died) takes the first
        request's bytes as that frame's tail, so one more request is sent if none answers."""
        for attempt in range(2):
            self._write(sf.status_request())
            try:
                return self._await_status(self._outlets(), timeout=self.timeout / (2 - attempt))
            except BoardError as e:
                if attempt or "no reply" not in str(e):
                    raise

    # The link ----------------------------------------------------------------------------

    def _write(self, data):
        import serial
        try:
            self._serial.write(data)
        except serial.SerialException as e:
            raise BoardError(f"lost the serial link {self.port!r}: {e}") from e

    def _replies(self, deadline=None, waiting=""):
        """Decoded reply frames waiting now; with a ``deadline``, wait until at least a byte
        comes (:class:`BoardError` once it passes)."""
        import serial
        try:
            while True:
                n = self._serial.in_waiting
                data = self._serial.read(n) if n else (self._serial.read(1) if deadline else b"")
                if data or deadline is None:
                    break
                if time.monotonic() > deadline:
                    raise BoardError(f"no reply from the bridge on {self.port!r} within "
                                     f"{self.timeout:g} s while waiting for {waiting} (is the "
                                     f"board programmed with the bridge, at {self.baud} baud?)")
        except serial.SerialException as e:
            raise BoardError(f"lost the serial link {self.port!r}: {e}") from e
        try:
            return self._decoder.feed(data)
        except sf.FrameError as e:
            raise BoardError(f"a reply from the bridge on {self.port!r} is corrupt: {e}; the "
                             f"link is out of step, reopen the System") from e

    def _outlets(self):
        return {c: [] for c in range(self.config.cols)}

    def _take(self, frames, outlets, credits):
        """Sort reply frames into ``outlets`` and ``credits``; return a status, or ``None``."""
        status = None
        for frame in frames:
            if frame[0] == "outlet":
                if frame[1] >= self.config.cols:
                    raise BoardError(f"the bridge sent a wavelet from column {frame[1]} of a "
                                     f"{self.config.cols}-column mesh")
                outlets[frame[1]].append(frame[2])
            elif frame[0] == "credit":
                if frame[1] < self.config.rows:
                    credits[frame[1]] += frame[2]
            else:
                status = frame[1]
        return status

    def _await_status(self, outlets, credits=None, timeout=None):
        credits = {} if credits is None else credits
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            before = sum(map(len, outlets.values())) + sum(credits.values())
            status = self._take(self._replies(deadline, "the status reply"), outlets, credits)
            if status is not None:
                self.last_status = status
                return status
            if sum(map(len, outlets.values())) + sum(credits.values()) != before:
                deadline = time.monotonic() + self.timeout      # still moving

    # The System's primitive --------------------------------------------------------------

    def _exchange(self, streams):
        if self._serial is None:
            raise BoardError("this System is closed")
        rows = self.config.rows
        queues = {r: deque(words) for r, words in streams.items() if words}
        credits = {r: self.fifo_depth for r in range(rows)}   # every FIFO empty after a status
        outlets = self._outlets()
        waiting = False
        while queues:
            batch = bytearray()
            for r in list(queues):              # one frame a row a round: rows move together
                if credits[r] > 0:
                    batch += sf.wavelet_frame(r, queues[r].popleft())
                    credits[r] -= 1
                    self.frames_sent += 1
                    if not queues[r]:
                        del queues[r]
            if batch:
                waiting = False
                self._write(batch)
                self._take(self._replies(), outlets, credits)
            else:                               # every row with words left waits for credit
                self.credit_waits += not waiting
                waiting = True
                self._take(self._replies(time.monotonic() + self.timeout,
                                         f"credit for rows {sorted(queues)}"), outlets, credits)
        self._write(sf.status_request())
        status = self._await_status(outlets, credits)
        result = Exchange(outlets=outlets, cycles=status.cycles,
                          error=status.error, overflow=status.overflow)
        new = status.bad_frames - self.bad_frames
        self.bad_frames = status.bad_frames
        if new:
            raise BoardError(f"the bridge on {self.port!r} counted {new} bad frame(s) in this "
                             f"exchange (checksum, framing, row or command, or a full intake "
                             f"FIFO): their wavelets never entered the mesh, so its results "
                             f"are incomplete", exchange=result)
        return result

    def close(self):
        """Close the serial port."""
        if getattr(self, "_serial", None) is not None:
            self._serial.close()
            self._serial = None
