"""The zero-skip MAC under cocotb on Verilator and Icarus, against the golden arithmetic."""

import pytest

from wse.rtl.mac import Mac
from wse.rtl.numfmt import FixedPoint
from wse.sim.cocotb_run import build, run

from .cocotb_checks import SIMS, check


@pytest.mark.parametrize("fmt", [FixedPoint(), FixedPoint(width=8, frac_bits=3, acc_width=16)],
                         ids=lambda f: f"int{f.width}acc{f.acc_width}")
@pytest.mark.parametrize("sim", SIMS)
def test_mac(sim, fmt, figure):
    built = build(Mac(fmt), top=f"mac_{fmt.width}_{fmt.acc_width}", sim=sim)
    result = run(built, module="wse.tb.mac_tests",
                 params={"fmt": vars(fmt), "seed": 3, "count": 3000})
    check(result, figure, sim)
