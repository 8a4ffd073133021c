"""The UART receiver and transmitter (``fpga/uart.py``) in Amaranth's simulator, against line
models (``tb/uart_sim.py``): bytes, timing, glitches, framing errors and parameter checks."""

import random

import pytest
from amaranth.hdl import Module
from amaranth.sim import Simulator

from wse.fpga.uart import UARTRx, UARTTx, check_divisor, divisor_for
from wse.tb.uart_sim import receive_bytes, send_bytes


def run_rx(divisor, script):
    """Run ``script(ctx, rx)`` against a receiver; return the ``(byte, error)`` it offered."""
    dut = UARTRx(divisor)
    got = []

    async def monitor(ctx):
        async for _, _, valid, payload in ctx.tick().sample(dut.o.valid, dut.o.payload):
            if valid:
                got.append((payload.data, payload.error))

    async def drive(ctx):
        await script(ctx, dut.rx)
        await ctx.tick().repeat(4 * divisor)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(monitor, background=True)
    sim.add_testbench(drive)
    sim.run()
    return got


@pytest.mark.parametrize("divisor", [4, 7, 16])
def test_rx_receives_bytes_back_to_back_and_with_gaps(divisor):
    data = [0x00, 0xFF, 0xA5, 0x5A, *random.Random(divisor).randbytes(12)]

    async def script(ctx, rx):
        await ctx.tick().repeat(3)
        await send_bytes(ctx, rx, data[:8], divisor)
        await send_bytes(ctx, rx, data[8:], divisor, gap=2)

    assert run_rx(divisor, script) == [(b, 0) for b in data]


def test_rx_ignores_a_glitch_and_flags_a_framing_error_once():
    divisor = 8

    async def script(ctx, rx):
        await ctx.tick().repeat(5)
        ctx.set(rx, 0)                      # shorter than half a bit: not a start bit
        await ctx.tick().repeat(2)
        ctx.set(rx, 1)
        await ctx.tick().repeat(3 * divisor)
        await send_bytes(ctx, rx, [0x3C], divisor, bad_stop={0})
        ctx.set(rx, 0)                      # a break: the line held low for 30 bit times
        await ctx.tick().repeat(30 * divisor)
        ctx.set(rx, 1)
        await ctx.tick().repeat(2 * divisor)
        await send_bytes(ctx, rx, [0x81], divisor)

    assert run_rx(divisor, script) == [(0x3C, 1), (0x00, 1), (0x81, 0)]


@pytest.mark.parametrize("divisor", [4, 9])
def test_tx_sends_bytes_at_ten_bits_a_byte_and_rx_takes_them_back(divisor):
    data = [0x00, 0xFF, *random.Random(3).randbytes(6)]
    m = Module()
    m.submodules.tx = tx = UARTTx(divisor)
    m.submodules.rx = rx = UARTRx(divisor)
    m.d.comb += rx.rx.eq(tx.tx)
    line, looped = [], []

    async def feed(ctx):
        for byte in data:
            ctx.set(tx.i.payload, byte)
            ctx.set(tx.i.valid, 1)
            await ctx.tick().until(tx.i.ready)
        ctx.set(tx.i.valid, 0)
        await ctx.tick().repeat(12 * divisor)

    async def loop(ctx):
        async for _, _, valid, payload in ctx.tick().sample(rx.o.valid, rx.o.payload):
            if valid:
                looped.append((payload.data, payload.error))

    async def watch(ctx):
        await receive_bytes(ctx, tx.tx, divisor, line)

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(loop, background=True)
    sim.add_testbench(watch, background=True)
    sim.add_testbench(feed)
    sim.run()
    assert [(b, ok) for b, ok, _ in line] == [(b, True) for b in data]
    assert looped == [(b, 0) for b in data]
    starts = [cycle for _, _, cycle in line]
    assert {b - a for a, b in zip(starts, starts[1:])} == {10 * divisor + 1}


def test_parameters_are_checked_with_clear_messages():
    assert check_divisor(4) == 4
    assert divisor_for(12_000_000, 115_200) == 104
    with pytest.raises(ValueError, match=r"^divisor must be at least 4 clock cycles a bit, not 3$"):
        UARTRx(3)
    with pytest.raises(TypeError, match=r"^divisor must be an integer, not 4.5$"):
        UARTTx(4.5)
    with pytest.raises(ValueError, match=r"^baud must be a positive integer, not 0$"):
        divisor_for(1_000_000, 0)
    with pytest.raises(ValueError, match=r"^clk_hz // baud must be at least 4 clock cycles"):
        divisor_for(1_000_000, 500_000)
    with pytest.raises(ValueError, match=r"^baud 115200 from clk_hz 1000000 \(divisor 8\) is off"):
        divisor_for(1_000_000, 115_200)
