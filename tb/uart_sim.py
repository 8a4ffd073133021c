"""UART line models for Amaranth's simulator (``sim.add_testbench``): 8N1 bytes driven onto and
read off a one-bit line, ``divisor`` clock cycles a bit. The cocotb models are in
:mod:`tb.uart`."""

__all__ = ["send_bytes", "receive_bytes"]


async def send_bytes(ctx, line, data, divisor, *, bad_stop=(), gap=0):
    """Drive ``data`` onto ``line``; the bytes whose indices are in ``bad_stop`` get a low stop
    bit (a framing error), then a bit time of idle. ``gap`` idle bit times follow each byte."""
    for index, byte in enumerate(data):
        bits = [0, *((byte >> k) & 1 for k in range(8)), 0 if index in bad_stop else 1]
        if index in bad_stop:
            bits.append(1)
        bits += [1] * gap
        for bit in bits:
            ctx.set(line, bit)
            await ctx.tick().repeat(divisor)
    ctx.set(line, 1)


async def receive_bytes(ctx, line, divisor, into):
    """Read bytes off ``line`` for ever (a background testbench), appending ``(byte, ok,
    cycle)`` to ``into``: ``ok`` is false when the start bit was not low in its middle or the
    stop bit not high; ``cycle`` is the cycle the start bit began."""
    cycle = 0
    while True:
        await ctx.tick()
        cycle += 1
        if ctx.get(line):
            continue
        start = cycle
        await ctx.tick().repeat(divisor // 2)
        ok = not ctx.get(line)
        byte = 0
        for k in range(8):
            await ctx.tick().repeat(divisor)
            byte |= ctx.get(line) << k
        await ctx.tick().repeat(divisor)
        ok = ok and bool(ctx.get(line))
        cycle += divisor // 2 + 9 * divisor
        into.append((byte, ok, start))
