"""cocotb testbench for the serial bridge (:class:`fpga.bridge.MeshBridge`): a serial cable.

The ``serve`` test resets the bridge, listens on the TCP port named in ``WSE_PARAMS`` and,
once a host connects (``runtime.board.BoardSystem`` on ``socket://127.0.0.1:<port>``), moves every
byte the host writes onto the bridge's ``rx`` line and every byte the bridge sends on ``tx``
back to the host, through UART models (:mod:`tb.uart`), until the host hangs up. While the
bridge is not busy and nothing is on the line, the simulation waits for the host in wall time
instead of running idle cycles.

``WSE_PARAMS``: ``config`` (the mesh), ``divisor``, ``port``, ``corrupt`` (indices of host
bytes to flip bit 2 of on the line: a noisy cable) and ``accept_timeout`` (seconds).
"""

import select
import socket

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge

from .router_tb import load_params
from .uart import UartSink, UartSource

__all__ = ["serve"]


@cocotb.test()
async def serve(dut):
    params = load_params()
    divisor = params["divisor"]
    corrupt = set(params.get("corrupt", []))
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rx.value = 1
    dut.rst.value = 1
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    await RisingEdge(dut.clk)

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", params["port"]))
    listener.listen(1)
    listener.settimeout(params.get("accept_timeout", 120))
    host, _ = listener.accept()
    listener.close()
    host.setblocking(False)

    source = UartSource(dut.clk, dut.rx, divisor)
    sink = UartSink(dut.clk, dut.tx, divisor, lambda byte: host.sendall(bytes([byte])))
    cocotb.start_soon(sink.run())
    received = 0
    try:
        while True:
            quiet = not int(dut.busy.value) and not sink.busy
            ready, _, _ = select.select([host], [], [], 0.05 if quiet else 0)
            if ready:
                data = host.recv(1 << 16)
                if not data:
                    break                               # the host hung up
                data = bytes(b ^ 0x04 if received + i in corrupt else b
                             for i, b in enumerate(data))
                received += len(data)
                source.send(data)
            if source.queue:
                await source.run()
            else:
                await ClockCycles(dut.clk, 10 * divisor)
    finally:
        host.close()
    dut._log.info(f"serial bridge: {received} bytes from the host, {sink.received} back, "
                  f"error output {int(dut.error.value)}")
