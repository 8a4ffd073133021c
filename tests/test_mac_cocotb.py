"""The zero-skip MAC under cocotb on Verilator and Icarus, against the golden arithmetic."""

import pytest

from wse.rtl.mac import Mac
from wse.rtl.numfmt import BFloat16, FixedPoint
from wse.sim.cocotb_run import build, run

from .cocotb_checks import SIMS, check


def _name(fmt):
    return "bf16" if fmt.is_float else f"int{fmt.width}acc{fmt.acc_width}"


def _top(fmt):
    return "mac_bf16" if fmt.is_float else f"mac_{fmt.width}_{fmt.acc_width}"


@pytest.mark.parametrize("fmt", [FixedPoint(), FixedPoint(width=8, frac_bits=3, acc_width=16),
                                 BFloat16()], ids=_name)
@pytest.mark.parametrize("sim", SIMS)
def test_mac(sim, fmt, figure):
    """3000 random operations back to back, 30 % zero operands each side (bf16: over the whole
    exponent range, with subnormals, ±inf, NaN and cancellations), bit for bit."""
    built = build(Mac(fmt), top=_top(fmt), sim=sim)
    result = run(built, module="wse.tb.mac_tests",
                 params={"fmt": fmt.to_dict(), "seed": 3, "count": 3000})
    check(result, figure, sim)
