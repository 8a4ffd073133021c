"""One tile (router + core) under cocotb on Verilator and Icarus, against the golden model."""

import pytest

from wse.fpga.boards import BOARDS
from wse.sim.tile_run import BENCH_MODULE, run_tile_tests

from .cocotb_checks import SIMS, SIMS_VERILATOR_SLOW, check


@pytest.mark.parametrize("testcase", ["gemm_sweep", "saturation", "bad_inputs"])
@pytest.mark.parametrize("sim", SIMS)
def test_tile(sim, testcase, figure):
    check(run_tile_tests(sim=sim, testcase=testcase), figure, f"{sim} tile")


@pytest.mark.parametrize("sim", SIMS_VERILATOR_SLOW)
def test_tile_in_a_middle_row(sim, figure):
    check(run_tile_tests(sim=sim, testcase="partial_sums", lanes=1, rows=3, row=1, n_out=4),
          figure, f"{sim} tile row 1 of 3")


@pytest.mark.parametrize("sim", SIMS_VERILATOR_SLOW)
def test_tile_ignores_another_columns_commands(sim, figure):
    check(run_tile_tests(sim=sim, testcase="select", col=1, cols=3), figure,
          f"{sim} tile column 1 of 3")


@pytest.mark.parametrize("sim", SIMS)
def test_tile_masks_its_own_columns_tokens(sim, figure):
    check(run_tile_tests(sim=sim, module=BENCH_MODULE, testcase="masked", n_tok=32, lanes=2,
                         n_out=4, col=1, cols=3),
          figure, f"{sim} tile masked, column 1 of 3")


def test_a_bf16_tile_costs_the_cycles_of_an_int16_tile(tmp_path, figure):
    """The PE bench (every phase and the counters checked against the golden model) on one tile
    in each format, bf16 with ``-0`` for every other zero weight: every cycle figure the same,
    and the zero weights, ``-0`` ones included, skipped."""
    import json

    from wse.rtl.numfmt import BFloat16, FixedPoint

    figures = {}
    for fmt in (FixedPoint(), BFloat16()):
        out = tmp_path / f"{fmt.name}.json"
        check(run_tile_tests(sim="verilator", module=BENCH_MODULE, testcase="pe_figures",
                             extra_env={"WSE_BENCH_OUT": str(out)}, lanes=2, n_tok=8,
                             n_feat=16, n_out=8, weights=60, fmt=fmt),
              figure, f"verilator tile pe_figures, {fmt.name}")
        figures[fmt.name] = json.loads(out.read_text())
    fixed, bf16 = figures["int16"], figures["bf16"]
    assert bf16["format"] == "bf16" and bf16["macs_skipped_weight"] > 0
    for name in ("cycles_per_weight", "busy_cycles_per_weight", "zero_weight_cycles",
                 "cr_overhead_cycles", "psum_engine_cycles_per_output", "random_placement",
                 "macs_issued", "macs_skipped_weight", "macs_skipped_act"):
        assert bf16[name] == fixed[name], name
    figure(f"tile in bf16: cycles per weight {bf16['cycles_per_weight']}, a zero weight "
           f"{bf16['zero_weight_cycles']} cycle, as int16")


#: The ULX3S's router options, read from the board (``fpga/boards.py``: 2-deep queues with
#: their tags beside the wavelets, a binary crossbar), so the test follows the board.
ULX3S_ROUTER = {k: v for k, v in BOARDS["ulx3s-85f"].config.items()
                if k in ("depth", "tag_slots", "crossbar")}


@pytest.mark.parametrize("sim", SIMS)
def test_tile_with_the_ulx3s_router(sim, figure):
    check(run_tile_tests(sim=sim, testcase="gemm_sweep", router=ULX3S_ROUTER), figure,
          f"{sim} tile, ULX3S router")
