"""A cocotb test that serves a mesh simulation to a host process over a socket.

:class:`runtime.simulator.CocotbSystem` starts a simulator with this module; the ``serve`` test
resets the mesh, connects to the Unix socket named in ``WSE_PARAMS`` (:func:`runtime.wire.connect`)
and runs the requests it reads, one at a time, while the simulation keeps its state between them
(the host loads activations, streams weights and reads results as separate exchanges, as on the
real fabric). The protocol is in :mod:`runtime.simulator`.

A failure (a stuck mesh, a broken stream rule) is answered with ``{"ok": false, "message":
...}`` and fails the test; so does a request that is not one of the protocol's, a host silent
for longer than the session's ``timeout`` and a host that hangs up without ``quit``.

``WSE_PARAMS``: ``config`` (the mesh), ``socket``, ``watchdog`` (cycles), ``timeout`` (the
longest wait for a request, seconds) and ``max_bytes`` (the longest request).
"""

import cocotb

from wse.rtl.wavelet import WAVELET_BITS
from wse.runtime.wire import MAX_MESSAGE_BYTES, connect, short

from .mesh_tb import MeshTB, config_from_params
from .router_tb import load_params

__all__ = ["serve"]


def _streams(request):
    """The ``streams`` of an exchange request, checked: ``{port: [words]}``."""
    streams = request.get("streams")
    if not isinstance(streams, dict) or not all(
            isinstance(words, list)
            and all(type(w) is int and 0 <= w < 1 << WAVELET_BITS for w in words)
            for words in streams.values()):
        raise AssertionError(f"an exchange's streams must map ports to lists of words, not "
                             f"{short(streams)}")
    return streams


@cocotb.test()
async def serve(dut):
    params = load_params()
    tb = MeshTB(dut, config_from_params(params), watchdog=params.get("watchdog", 5000))
    await tb.start(reset_cycles=params.get("reset_cycles", 3))
    host = connect(params["socket"], peer="the host", timeout=params.get("timeout", 6 * 3600),
                   max_bytes=params.get("max_bytes", MAX_MESSAGE_BYTES))
    try:
        while True:
            request = host.receive()        # SimulationError: silent, gone or garbled host
            op = request.get("op")
            if op == "quit":
                break
            try:
                if op != "exchange":
                    raise AssertionError(f"unknown request {short(op)}")
                received, cycles = await tb.exchange(_streams(request))
            except (AssertionError, ValueError) as failure:
                host.send({"ok": False, "message": str(failure)})
                raise
            host.send({"ok": True, "received": received, "cycles": cycles, **tb.flags()})
    finally:
        host.close()
