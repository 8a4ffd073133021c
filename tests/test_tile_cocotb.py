"""One tile (router + core) under cocotb on Verilator and Icarus, against the golden model."""

import pytest

from wse.sim.tile_run import BENCH_MODULE, run_tile_tests

from .cocotb_checks import SIMS, check


@pytest.mark.parametrize("testcase", ["gemm_sweep", "saturation", "bad_inputs"])
@pytest.mark.parametrize("sim", SIMS)
def test_tile(sim, testcase, figure):
    check(run_tile_tests(sim=sim, testcase=testcase), figure, f"{sim} tile")


@pytest.mark.parametrize("sim", SIMS)
def test_tile_in_a_middle_row(sim, figure):
    check(run_tile_tests(sim=sim, testcase="partial_sums", lanes=1, rows=3, row=1, n_out=4),
          figure, f"{sim} tile row 1 of 3")


@pytest.mark.parametrize("sim", SIMS)
def test_tile_ignores_another_columns_commands(sim, figure):
    check(run_tile_tests(sim=sim, testcase="select", col=1, cols=3), figure,
          f"{sim} tile column 1 of 3")


@pytest.mark.parametrize("sim", SIMS)
def test_tile_masks_its_own_columns_tokens(sim, figure):
    check(run_tile_tests(sim=sim, module=BENCH_MODULE, testcase="masked", n_tok=32, lanes=2,
                         n_out=4, col=1, cols=3),
          figure, f"{sim} tile masked, column 1 of 3")
