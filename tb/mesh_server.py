"""A cocotb test that serves a mesh simulation to a host process over a socket.

:class:`runtime.system.CocotbSystem` starts a simulator with this module; the ``serve`` test resets
the mesh, connects to the Unix socket named in ``WSE_PARAMS`` and runs the requests it reads,
one at a time, while the simulation keeps its state between them (the host loads activations,
streams weights and reads results as separate exchanges, as on the real fabric).

Protocol: each message is a 4-byte big-endian length and a JSON object (:mod:`runtime.wire`).
``{"op": "exchange", "streams": {port: [words]}}`` -> ``{"ok": true, "received": {port:
[words]}, "cycles": n, "error": 0|1, "overflow": 0|1}``; ``{"op": "quit"}`` ends the test.
A failure (a stuck mesh, a broken stream rule) is answered with ``{"ok": false, "message":
...}`` and fails the test.
"""

import socket

import cocotb

from wse.runtime.wire import recv_message, send_message

from .mesh_tb import MeshTB, config_from_params
from .router_tb import load_params


@cocotb.test()
async def serve(dut):
    params = load_params()
    tb = MeshTB(dut, config_from_params(params), watchdog=params.get("watchdog", 5000))
    await tb.start()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(params["socket"])
    try:
        while True:
            request = recv_message(sock)
            if request is None or request["op"] == "quit":
                break
            if request["op"] != "exchange":
                send_message(sock, {"ok": False, "message": f"unknown op {request['op']!r}"})
                raise AssertionError(f"unknown request {request['op']!r}")
            try:
                received, cycles = await tb.exchange(request["streams"])
            except AssertionError as failure:
                send_message(sock, {"ok": False, "message": str(failure)})
                raise
            send_message(sock, {"ok": True, "received": received, "cycles": cycles,
                                **tb.flags()})
    finally:
        sock.close()
