"""cocotb tests of the harness itself, run by tests/test_harness.py on any built design."""

import cocotb


@cocotb.test()
async def hang(dut):
    """Never returns and never yields to the simulator: only the wall-clock deadline ends it."""
    while True:
        pass
