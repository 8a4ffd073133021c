"""The socket between a simulated mesh and its host: one JSON object per message over a Unix
socket, framed by :mod:`multiprocessing.connection`.

:class:`~wse.runtime.simulator.CocotbSystem` opens a :class:`Rendezvous` (a socket in a fresh
temporary folder, readable by this user only, removed on close) and starts the simulator;
:mod:`wse.tb.mesh_server`, inside it, :func:`connect` s. Each end then holds a :class:`Channel`.

A channel never waits without bound and never lets a fault of its peer through as anything but
a one-line :class:`~wse.runtime.system.SimulationError`: a peer that says nothing within the
timeout, one that closed the connection (:class:`ChannelClosed`), a message longer than the
cap, one that is not JSON, nests too deeply to parse, or is not a JSON object. What the object
must hold is the protocol's business (:mod:`wse.runtime.simulator`, :mod:`wse.tb.mesh_server`);
:func:`exchange_reply` reads the reply to an exchange, which the compiled model's pipe
(:mod:`wse.runtime.compiled`) answers in the same form.
"""

import contextlib
import json
import os
import reprlib
import shutil
import socket
import threading
import time
import weakref
from multiprocessing.connection import Client, Listener

from wse.rtl.validate import count, number
from wse.rtl.wavelet import WAVELET_BITS
from wse.sim.scratch import make_folder

from .system import Exchange, SimulationError

__all__ = ["MAX_MESSAGE_BYTES", "SOCKET_PREFIX", "ChannelClosed", "Channel", "Rendezvous",
           "connect", "short", "exchange_reply"]

#: The longest message either end accepts, in bytes (a reply of a few million wavelets).
MAX_MESSAGE_BYTES = 1 << 28
_FAMILY = "AF_UNIX"
_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = 40


def short(value):
    """``repr(value)`` cut to a few dozen characters, for one-line messages."""
    return _SHORT.repr(value)


class ChannelClosed(SimulationError):
    """The peer closed the connection (it ended, or died)."""


def _reject_constant(name):
    raise ValueError(f"{name} is not a JSON number")


class Channel:
    """One end of the socket: :meth:`send` and :meth:`receive` JSON objects.

    ``peer`` names the other end in messages (``"the verilator simulation"``); ``timeout``
    (seconds) bounds every wait: a message must start to arrive within it and then arrive
    whole within as long again, and a send must be taken within it. ``max_bytes`` caps a
    message. After any fault the channel is closed.
    """

    def __init__(self, connection, *, peer, timeout, max_bytes=MAX_MESSAGE_BYTES):
        self.peer = str(peer)
        self.timeout = number("timeout", timeout, 0, open_lo=True)
        self.max_bytes = count("max_bytes", max_bytes)
        self._connection = connection

    @property
    def closed(self):
        return self._connection is None

    def close(self):
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def send(self, message):
        """Send ``message`` (a JSON-able ``dict``); ``ValueError`` (and the channel stays open)
        if it is longer than ``max_bytes``."""
        data = json.dumps(message, separators=(",", ":"), allow_nan=False).encode()
        if len(data) > self.max_bytes:      # refused before anything is sent
            raise ValueError(f"a message to {self.peer} would be {len(data)} bytes, more than "
                             f"the {self.max_bytes} allowed")
        connection = self._open()
        with self._fault(), self._deadline(self.timeout, "did not take a message"):
            connection.send_bytes(data)

    def receive(self, timeout=None):
        """The next message (a ``dict``); ``timeout`` overrides the channel's for this wait."""
        timeout = self.timeout if timeout is None else number("timeout", timeout, 0,
                                                              open_lo=True)
        connection = self._open()
        with self._fault():
            if not connection.poll(timeout):
                self.close()
                raise SimulationError(f"no message from {self.peer} within {timeout:g} s")
            with self._deadline(timeout, "sent only part of a message"):
                data = connection.recv_bytes(self.max_bytes)
        try:
            message = json.loads(data, parse_constant=_reject_constant)
        except RecursionError:
            self.close()
            raise SimulationError(f"a message from {self.peer} nests too deeply to "
                                  f"parse") from None
        except ValueError as e:
            self.close()
            raise SimulationError(f"a message from {self.peer} is not JSON: "
                                  f"{str(e).splitlines()[0]}") from None
        if not isinstance(message, dict):
            self.close()
            raise SimulationError(f"a message from {self.peer} is not a JSON object but "
                                  f"{short(message)}")
        return message

    def _open(self):
        if self._connection is None:
            raise SimulationError(f"the connection to {self.peer} is closed")
        return self._connection

    @contextlib.contextmanager
    def _fault(self):
        """Turn what the connection raises into one-line errors; close the channel on any."""
        try:
            yield
        except EOFError:
            self.close()
            raise ChannelClosed(f"{self.peer} closed the connection") from None
        except OSError as e:
            self.close()
            if str(e) == "bad message length":     # recv_bytes past maxlength
                raise SimulationError(f"a message from {self.peer} is longer than the "
                                      f"{self.max_bytes} bytes allowed") from None
            if str(e) == "got end of file during message":
                raise ChannelClosed(f"{self.peer} closed the connection in the middle of a "
                                    f"message") from None
            raise SimulationError(f"lost the connection to {self.peer}: {e}") from None
        except BaseException:
            self.close()
            raise

    @contextlib.contextmanager
    def _deadline(self, seconds, what):
        """Shut the socket down if the block outlasts ``seconds`` (a blocked read or write
        then returns), and say so."""
        fired = threading.Event()
        spare = socket.socket(fileno=os.dup(self._connection.fileno()))   # ours till the end

        def cut():
            fired.set()
            with contextlib.suppress(OSError):
                spare.shutdown(socket.SHUT_RDWR)

        timer = threading.Timer(seconds, cut)
        timer.daemon = True
        timer.start()
        try:
            yield
        except (EOFError, OSError):
            if fired.is_set():
                self.close()
                raise SimulationError(f"{self.peer} {what} within {seconds:g} s") from None
            raise
        finally:
            timer.cancel()
            timer.join()
            spare.close()
        if fired.is_set():      # fired just as the transfer completed: the socket is gone
            self.close()
            raise SimulationError(f"{self.peer} {what} within {seconds:g} s")


def connect(address, **channel):
    """The :class:`Channel` to the :class:`Rendezvous` at ``address`` (the simulator's end)."""
    try:
        connection = Client(address, family=_FAMILY)
    except OSError as e:
        raise SimulationError(f"cannot connect to {address}: {e}") from None
    return Channel(connection, **channel)


#: The longest path a Unix socket may have (Linux's ``sun_path``, less its terminating NUL).
_SUN_PATH = 107

#: The socket folders' prefix in the temporary directory (``<prefix><pid>-<random>``: a folder
#: whose process was killed is removed by the next one made, :func:`wse.sim.scratch.sweep`).
SOCKET_PREFIX = "wse-socket-"


class Rendezvous:
    """A Unix socket for one peer, in a temporary folder of its own; :meth:`close` removes
    both (and so does the garbage collector, or the interpreter's exit, if no one called it).
    ``address`` is what the peer gives :func:`connect`."""

    def __init__(self):
        self.directory = str(make_folder(SOCKET_PREFIX))
        self.address = os.path.join(self.directory, "s")      # short: sun_path holds 107 bytes
        if len(os.fsencode(self.address)) > _SUN_PATH:
            _remove([], self.directory)
            raise SimulationError(f"the socket path {self.address} is longer than the "
                                  f"{_SUN_PATH} bytes a Unix socket allows: set TMPDIR to a "
                                  f"shorter folder")
        self._lock = threading.Lock()
        self._woken = False
        self._held = []         # the listener while it listens: what the finalizer closes
        self._remove = weakref.finalize(self, _remove, self._held, self.directory)
        try:
            self._listener = Listener(self.address, family=_FAMILY)
        except BaseException:
            self._remove()
            raise
        self._held.append(self._listener)

    def accept(self, wait, *, gone=None, **channel):
        """The :class:`Channel` (made with the keywords ``channel``) to the peer once it
        connects. Waits at most ``wait`` seconds, or until :meth:`wake` is called (by whatever
        sees the peer end first); ``gone()`` then says why it never came (``None``: it did not
        connect in time)."""
        wait = number("wait", wait, 0, open_lo=True)
        peer = channel.get("peer", "the peer")
        if self._listener is None:
            raise SimulationError(f"the socket for {peer} is closed")
        timer = threading.Timer(wait, self.wake)
        timer.daemon = True
        timer.start()
        try:
            connection = self._listener.accept()
        finally:
            timer.cancel()
        with self._lock:
            woken = self._woken
            self._listener.close()      # no one else may connect
            self._listener = None
            self._held.clear()
        if woken:
            connection.close()
            reason = gone() if gone is not None else None
            raise SimulationError(reason or f"{peer} did not connect within {wait:g} s")
        return Channel(connection, **channel)

    def wake(self):
        """End a wait in :meth:`accept` (by connecting to the socket: the listener has no
        timeout of its own); does nothing once the wait is over."""
        with self._lock:
            if self._listener is None or self._woken:
                return
            self._woken = True
        deadline = time.monotonic() + 5
        while self._listener is not None and time.monotonic() < deadline:
            try:
                Client(self.address, family=_FAMILY).close()
                return
            except OSError:
                time.sleep(0.05)

    def close(self):
        """Stop listening and remove the socket's folder."""
        with self._lock:
            self._listener = None
            self._woken = True
        self._remove()


def _remove(held, directory):
    for listener in held:
        listener.close()        # unlinks the socket
    held.clear()
    shutil.rmtree(directory, ignore_errors=True)


def exchange_reply(reply, peer, cols):
    """The :class:`~wse.runtime.system.Exchange` a reply to an exchange request describes (from
    ``peer``, of a ``cols``-column mesh), or the testbench's failure message (a ``str``);
    :class:`SimulationError` for any other reply."""

    def malformed(cause):
        return SimulationError(f"{peer} sent a malformed reply: {cause}")

    def get(key):
        if key not in reply:
            raise malformed(f"it has no {key!r}")
        return reply[key]

    ok = get("ok")
    if ok is False:
        message = get("message")
        if not isinstance(message, str):
            raise malformed(f"'message' must be a string, not {short(message)}")
        return message
    if ok is not True:
        raise malformed(f"'ok' must be true or false, not {short(ok)}")
    received, cycles = get("received"), get("cycles")
    if not isinstance(received, dict):
        raise malformed(f"'received' must be an object, not {short(received)}")
    outlets = {}
    for name, words in received.items():
        if not isinstance(words, list) or not all(
                type(w) is int and 0 <= w < 1 << WAVELET_BITS for w in words):
            raise malformed(f"{name!r} must be a list of {WAVELET_BITS}-bit words, not "
                            f"{short(words)}")
        if name.startswith("m_axis_s"):
            index = name[len("m_axis_s"):]
            if not (index.isascii() and index.isdigit() and int(index) < cols):
                raise malformed(f"{short(name)} is no outlet of a {cols}-column mesh")
            outlets[int(index)] = words
    if type(cycles) is not int or cycles < 0:
        raise malformed(f"'cycles' must be a non-negative integer, not {short(cycles)}")
    flags = {}
    for key in ("error", "overflow"):
        value = get(key)
        if type(value) not in (int, bool) or value not in (0, 1):
            raise malformed(f"{key!r} must be 0 or 1, not {short(value)}")
        flags[key] = bool(value)
    return Exchange(outlets=outlets, cycles=cycles, **flags)
