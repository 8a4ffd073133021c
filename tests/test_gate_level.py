"""Gate-level simulation (:mod:`sim.gate_level`): a board's mesh synthesised with exactly that
board's Yosys options (read from ``fpga.boards``, so the test follows the board when they
change), its netlist run under the mesh's cocotb testbench with Yosys's cell models on Icarus,
against the same program on the un-synthesised RTL (same simulator, same testbench) and the
golden model: every exchange's outlets, cycles and flags equal to the RTL's, every result bit
for bit the golden model's, every counter the RTL's.
"""

import json

import numpy as np
import pytest

from wse.fpga.boards import BOARDS, mesh_config
from wse.rtl.core_params import COUNTERS
from wse.rtl.wavelet import pack
from wse.runtime import CocotbSystem, GoldenSystem
from wse.sim.cocotb_run import BUILD_ROOT
from wse.sim.gate_level import MissingModels, build_netlist, synthesise_netlist

from .gemm_runs import run_gemm
from .test_compiled import Recording, run_program, same_exchange
from .test_mesh_cocotb import random_gemm

#: The synthesis and its Icarus build are one worker's, whatever the other tests do.
pytestmark = pytest.mark.xdist_group("gate_level")


class NetlistSystem(CocotbSystem):
    """The ``icarus`` System on a synthesised netlist instead of the RTL it would build."""

    def __init__(self, config, built, **options):
        self._netlist = built
        super().__init__(config, sim=built.sim, **options)

    def _build(self, waves):
        return self._netlist


def program(system, W, X, seed, steps):
    """One GEMM of every core's size (with its counters), ``steps`` random operations (GEMMs
    requantised, raw, zeros streamed and masked, memory copies, counter reads), then a foreign
    color into the intake (dropped and flagged); what each returned."""
    gemm = run_gemm(system, W, X)
    rest = run_program(system, np.random.default_rng(seed), system.config, steps)
    bad = int(pack(123, system.config.plan.out(0), 0))     # a reply color entering an intake
    flagged = system.exchange({0: [bad]}).error
    return gemm, rest, flagged, system.counters()


def compare(name, seed, steps):
    """Synthesise board ``name``'s 1x1 mesh with its options and run the same
    :func:`program` on the netlist, the RTL and the golden model; every exchange and result
    compared. The figure's line."""
    board = BOARDS[name]
    config = mesh_config(board, 1, 1)
    out = BUILD_ROOT / "gate_level" / f"{name}-1x1"
    netlist = synthesise_netlist(config, board.family, board.synth_opts, out)
    built = build_netlist(netlist, board.family)
    W, X = random_gemm(np.random.default_rng(seed), config.n_out, config.n_feat,
                       config.n_tok, sparsity=0.5)
    gate = Recording(NetlistSystem(config, built))
    rtl = Recording(CocotbSystem(config, sim="icarus"))
    with gate.system, rtl.system, GoldenSystem(config) as golden:
        runs = [program(system, W, X, seed, steps) for system in (gate.system, rtl.system,
                                                                  golden)]
    (gemm, rest, flagged, counters), (rtl_gemm, rtl_rest, rtl_flagged, rtl_counters), \
        (want, want_rest, want_flagged, _) = runs
    assert len(gate.log) == len(rtl.log)
    for k, ((streams_a, a), (streams_b, b)) in enumerate(zip(gate.log, rtl.log)):
        assert streams_a == streams_b
        same_exchange(a, b, f"exchange {k}")
    np.testing.assert_array_equal(gemm.y, want.y)
    for a, b, c in zip(rest, rtl_rest, want_rest):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)
    assert flagged and rtl_flagged and want_flagged
    for key in COUNTERS:
        np.testing.assert_array_equal(counters[key], rtl_counters[key], err_msg=key)
    assert gemm.cycles == rtl_gemm.cycles
    cells = json.loads((out / "stat.json").read_text())["modules"]
    cells = next(iter(cells.values()))["num_cells_by_type"]
    luts = sum(n for cell, n in cells.items() if "LUT" in cell)
    ffs = sum(n for cell, n in cells.items() if cell.startswith(("SB_DFF", "TRELLIS_FF")))
    return (f"gate level, {name} 1x1 netlist (synth_{board.family} {board.synth_opts}: {luts} "
            f"LUTs, {ffs} FFs) vs RTL on Icarus: {W.shape[0]}x{W.shape[1]}x{X.shape[1]} GEMM "
            f"{gemm.cycles} cycles netlist, {rtl_gemm.cycles} RTL; {len(gate.log)} exchanges, "
            f"{sum(e.cycles for _, e in gate.log)} cycles, all equal; results bit-exact")


@pytest.mark.slow      # 40 s: the iCEBreaker netlist in simulation
def test_the_icebreaker_netlist_runs_a_gemm_like_the_rtl(figure):
    figure(compare("icebreaker", seed=5, steps=8))



def test_bad_requests_are_refused_by_name(tmp_path):
    """An unknown family, a config that is not one, a netlist that is not there: each a clear
    error, before any tool runs."""
    config = mesh_config(BOARDS["icebreaker"], 1, 1)
    with pytest.raises(ValueError, match="family must be one of ice40, ecp5, not 'xc7'"):
        synthesise_netlist(config, "xc7", "", tmp_path)
    with pytest.raises(TypeError, match="config must be a MeshConfig"):
        synthesise_netlist("1x1", "ice40", "", tmp_path)
    with pytest.raises(FileNotFoundError, match="no netlist at"):
        build_netlist(tmp_path / "netlist.v", "ice40")


def test_an_ecp5_netlist_names_the_cells_its_models_cannot_simulate(figure):
    """Yosys 0.70's ECP5 models give the block RAM no behaviour and have no multiplier: the
    ULX3S's netlist is refused naming both, not simulated with undriven outputs."""
    board = BOARDS["ulx3s-85f"]
    netlist = synthesise_netlist(mesh_config(board, 1, 1), board.family, board.synth_opts,
                                 BUILD_ROOT / "gate_level" / "ulx3s-85f-1x1")
    with pytest.raises(MissingModels, match="DP16KD.*MULT18X18D") as refused:
        build_netlist(netlist, board.family)
    figure(f"gate level, ulx3s-85f 1x1: {refused.value}")
