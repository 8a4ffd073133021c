"""The socket between :class:`runtime.simulator.CocotbSystem` and its simulator
(:mod:`runtime.wire`), against fake simulators: Python peers on the simulator's thread that
answer well, answer garbage, answer too much, say nothing, hang up or never come.

Every fault must come back as a one-line :class:`SimulationError` naming it (never a
``TypeError``, ``KeyError`` or ``RecursionError``, never a hang), and the socket's temporary
folder must be gone once the System is closed.
"""

import json
import os
import struct
import threading
import time
from multiprocessing.connection import Client
from pathlib import Path

import pytest

from wse.fabric.config import MeshConfig
from wse.runtime import CocotbSystem, SimulationError
from wse.runtime.wire import Rendezvous, connect
from wse.sim.cocotb_run import Result

CONFIG = MeshConfig(1, 2, n_feat=4, n_tok=2, n_out=4)
QUICK = 0.5         # seconds: the bound of every wait these tests provoke


def _ok(received=None, cycles=7, **extra):
    return {"ok": True, "received": {"m_axis_s0": [], "m_axis_s1": []} if received is None
            else received, "cycles": cycles, "error": 0, "overflow": 0, **extra}


class FakeSimulation(CocotbSystem):
    """A :class:`CocotbSystem` whose simulator is ``peer(connection)``, run on the simulator's
    thread with the raw :class:`multiprocessing.connection.Connection` (``None`` when
    ``connect`` is false); ``failures`` is what the run reports once ``peer`` returns."""

    def __init__(self, peer, *, connect=True, failures=None, seen=None, **kwargs):
        self.peer, self.connect, self.failures = peer, connect, failures or {}
        self.socket_dir = None
        if seen is not None:
            seen.append(self)
        kwargs.setdefault("reply_timeout", QUICK)
        kwargs.setdefault("connect_timeout", 5)
        super().__init__(CONFIG, **kwargs)

    def _build(self, waves):
        return None

    def _simulate(self, params):
        self.socket_dir = Path(params["socket"]).parent
        connection = Client(params["socket"], family="AF_UNIX") if self.connect else None
        try:
            self.peer(connection)
        finally:
            if connection is not None:
                connection.close()
        return Result(tests=1, failed=len(self.failures), results_xml=Path("results.xml"),
                      test_dir=Path("run"), failures=self.failures)


def serve(*replies):
    """A peer that answers each request with the next of ``replies`` (bytes sent as they are,
    anything else as JSON), then waits for ``quit`` or the host hanging up."""
    def peer(connection):
        try:
            for reply in replies:
                json.loads(connection.recv_bytes())
                connection.send_bytes(reply if isinstance(reply, bytes)
                                      else json.dumps(reply).encode())
            while connection.poll(30) and json.loads(connection.recv_bytes())["op"] != "quit":
                pass
        except (EOFError, OSError):     # the host hung up: it refused what it was sent
            pass
    return peer


def one_line(error):
    message = str(error.value)
    assert "\n" not in message, message
    return message


def test_a_good_peer_is_served_and_the_socket_folder_goes_with_the_system():
    system = FakeSimulation(serve(_ok({"m_axis_s1": [5, 6], "m_axis_e0": [1]}, cycles=12)))
    directory = Path(system.socket_folder)
    assert directory.is_dir() and oct(directory.stat().st_mode & 0o777) == "0o700"
    with system:
        got = system.exchange({0: [1, 2]})
    assert got.outlets == {1: [5, 6]} and got.cycles == 12 and not got.error
    assert not directory.exists() and system.result.passed
    with pytest.raises(SimulationError, match=r"^this System is closed"):
        system.exchange({0: [1]})


GARBAGE = [
    (b"not json", r"^a message from the verilator simulation is not JSON: Expecting value"),
    (b"[1, 2]", r"^a message from the verilator simulation is not a JSON object but \[1, 2\]$"),
    (b'{"ok": NaN}', r"is not JSON: NaN is not a JSON number"),
    (b"[" * 100_000 + b"]" * 100_000, r"^a message from the verilator simulation nests too "
                                      r"deeply to parse$"),
    ({"ok": True}, r"^the verilator simulation sent a malformed reply: it has no 'received'$"),
    ({"ok": "yes"}, r"malformed reply: 'ok' must be true or false, not 'yes'$"),
    ({"ok": False, "message": 3}, r"malformed reply: 'message' must be a string, not 3$"),
    (_ok({"m_axis_s0": ["x"]}), r"'m_axis_s0' must be a list of 38-bit words, not \['x'\]$"),
    (_ok({"m_axis_s0": [1 << 38]}), r"'m_axis_s0' must be a list of 38-bit words"),
    (_ok({"m_axis_s0": [True]}), r"'m_axis_s0' must be a list of 38-bit words"),
    (_ok({"m_axis_s0": 4}), r"'m_axis_s0' must be a list of 38-bit words, not 4$"),
    (_ok({"m_axis_s2": []}), r"'m_axis_s2' is no outlet of a 2-column mesh$"),
    (_ok([]), r"'received' must be an object, not \[\]$"),
    (_ok(cycles=-1), r"'cycles' must be a non-negative integer, not -1$"),
    (_ok(cycles=1.5), r"'cycles' must be a non-negative integer, not 1.5$"),
    (_ok(error=2), r"'error' must be 0 or 1, not 2$"),
    ({**_ok(), "overflow": None}, r"'overflow' must be 0 or 1, not None$"),
]


@pytest.mark.parametrize("reply, message", GARBAGE, ids=range(len(GARBAGE)))
def test_a_malformed_reply_is_named(reply, message):
    system = FakeSimulation(serve(reply))
    with pytest.raises(SimulationError, match=message) as error:
        system.exchange({0: [1]})
    one_line(error)
    with pytest.raises(SimulationError, match=r"^this System is closed"):
        system.exchange({0: [1]})       # out of step: no second request on that socket
    system.close()
    assert not system.socket_dir.exists()


def test_a_fault_inside_a_with_block_is_the_error_that_comes_out():
    """Leaving the block after a fault does not replace the fault with a second report."""
    with pytest.raises(SimulationError, match=r"^a message from the verilator simulation is "
                                              r"not JSON"):
        with FakeSimulation(serve(b"x"), failures={"serve": "the host hung up"}) as system:
            system.exchange({0: [1]})
    assert not system.socket_dir.exists()


def test_a_reply_past_the_cap_is_refused_unread():
    system = FakeSimulation(serve(_ok({"m_axis_s0": list(range(1000))})), max_message_bytes=2000)
    with pytest.raises(SimulationError, match=r"^a message from the verilator simulation is "
                                              r"longer than the 2000 bytes allowed$") as error:
        system.exchange({0: [1]})
    one_line(error)
    system.close()
    assert not system.socket_dir.exists()


def test_a_request_past_the_cap_is_refused_and_the_session_goes_on():
    system = FakeSimulation(serve(_ok(cycles=3)), max_message_bytes=200)
    with pytest.raises(ValueError, match=r"^a message to the verilator simulation would be "
                                         r"\d+ bytes, more than the 200 allowed$"):
        system.exchange({0: list(range(100))})
    assert system.exchange({0: [1]}).cycles == 3
    system.close()
    assert not system.socket_dir.exists()


def test_a_silent_peer_times_out():
    release = threading.Event()

    def silent(connection):
        connection.recv_bytes()
        release.wait(10)

    system = FakeSimulation(silent)
    start = time.monotonic()
    with pytest.raises(SimulationError, match=r"^no message from the verilator simulation "
                                              r"within 0.5 s$") as error:
        system.exchange({0: [1]})
    assert time.monotonic() - start < 5
    one_line(error)
    release.set()
    system.close()
    assert not system.socket_dir.exists()


def test_a_peer_stuck_in_the_middle_of_a_reply_times_out():
    release = threading.Event()

    def stuck(connection):
        connection.recv_bytes()
        os.write(connection.fileno(), struct.pack("!i", 100) + b'{"ok": tr')
        release.wait(10)

    system = FakeSimulation(stuck)
    with pytest.raises(SimulationError, match=r"^the verilator simulation sent only part of a "
                                              r"message within 0.5 s$") as error:
        system.exchange({0: [1]})
    one_line(error)
    release.set()
    system.close()
    assert not system.socket_dir.exists()


@pytest.mark.parametrize("midway", [False, True])
def test_a_peer_that_dies_is_reported_with_its_failure(midway):
    def dies(connection):
        connection.recv_bytes()
        if midway:
            os.write(connection.fileno(), struct.pack("!i", 100) + b'{"ok"')

    system = FakeSimulation(dies, failures={"serve": "the simulator crashed"})
    with pytest.raises(SimulationError, match=r"^the verilator simulation ended: serve: the "
                                              r"simulator crashed \(log: ") as error:
        system.exchange({0: [1]})
    one_line(error)
    system.close()          # the failure was reported once, by the exchange
    assert not system.result.passed and not system.socket_dir.exists()


def test_a_failed_testbench_reply_ends_the_session():
    system = FakeSimulation(serve({"ok": False, "message": "watchdog: the mesh was busy"}),
                            failures={"serve": "watchdog"})
    with pytest.raises(SimulationError, match=r"^watchdog: the mesh was busy$"):
        system.exchange({0: [1]})
    system.close(check=False)
    assert not system.socket_dir.exists()


def test_a_simulator_that_never_connects_or_ends_first_is_named():
    release, seen = threading.Event(), []
    with pytest.raises(SimulationError, match=r"^the verilator simulation did not connect "
                                              r"within 0.5 s$") as error:
        FakeSimulation(lambda _: release.wait(10), connect=False, connect_timeout=QUICK,
                       seen=seen)
    one_line(error)
    release.set()
    start = time.monotonic()
    with pytest.raises(SimulationError, match=r"^the verilator simulation ended before it "
                                              r"connected: serve: no such module") as error:
        FakeSimulation(lambda _: None, connect=False, failures={"serve": "no such module"},
                       seen=seen)
    assert time.monotonic() - start < 4         # not the 5 s connect_timeout
    one_line(error)
    assert len(seen) == 2 and not any(system.socket_dir.exists() for system in seen)


def test_the_simulator_side_names_a_silent_host_and_a_missing_socket():
    rendezvous = Rendezvous()
    try:
        got = {}

        def simulator():
            got["channel"] = connect(rendezvous.address, peer="the host", timeout=QUICK)

        thread = threading.Thread(target=simulator)
        thread.start()
        host = rendezvous.accept(5, peer="the simulation", timeout=QUICK)
        thread.join()
        simulator_end = got["channel"]
        host.send({"op": "exchange", "streams": {}})
        assert simulator_end.receive() == {"op": "exchange", "streams": {}}
        with pytest.raises(SimulationError, match=r"^no message from the host within 0.5 s$"):
            simulator_end.receive()
        assert simulator_end.closed
        host.close()
    finally:
        rendezvous.close()
    assert not Path(rendezvous.address).parent.exists()
    with pytest.raises(SimulationError, match=r"^cannot connect to .*/s: "):
        connect(rendezvous.address, peer="the host", timeout=QUICK)


def test_parameters_are_checked_before_anything_starts():
    for kwargs, message in [({"sim": "questa"}, r"^sim must be one of verilator, icarus, not "
                                                r"'questa'$"),
                            ({"reply_timeout": 0}, r"^reply_timeout must be a finite number "
                                                   r"above 0, not 0$"),
                            ({"watchdog": -1}, r"^watchdog must be a positive integer, not -1$"),
                            ({"max_message_bytes": "big"}, r"^max_message_bytes must be a "
                                                           r"positive integer")]:
        with pytest.raises(ValueError, match=message):
            CocotbSystem(CONFIG, **kwargs)


def test_a_socket_path_too_long_for_unix_is_one_line_naming_tmpdir(tmp_path, monkeypatch):
    """A temporary directory so deep that the socket's path passes the 107 bytes a Unix
    socket allows: one line that names the path and TMPDIR, and no folder left behind."""
    import tempfile

    deep = tmp_path / ("d" * 100)
    deep.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    with pytest.raises(SimulationError, match=r"^the socket path .* is longer than the 107 "
                                              r"bytes a Unix socket allows: set TMPDIR to a "
                                              r"shorter folder$"):
        Rendezvous()
    assert list(deep.iterdir()) == []
