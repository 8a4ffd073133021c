"""The crossbar whose 4:1 outputs end in the ECP5's ``PFUMX`` primitive (``mux="pfumx"``, the
ULX3S's routers): simulated on Verilator and Icarus with Yosys's own model of the primitive
against what it is specified to give, and what the ULX3S's synthesis (``synth_ecp5
-nowidelut``) makes of it beside the AND-OR crossbar. (The AND-OR one is checked in Amaranth's
simulator, ``tests/test_router_parts.py``; a tile with the ULX3S's router in
``tests/test_tile_cocotb.py``.)"""

import json
import re
import subprocess

import pytest
from amaranth.hdl import Shape

from wse.fpga.boards import BOARDS
from wse.fpga.build import after_synth, tool_environment
from wse.rtl.crossbar import Crossbar
from wse.rtl.router import Router
from wse.rtl.wavelet import Wavelet
from wse.sim.cocotb_run import build, run
from wse.sim.export import export_verilog
from wse.sim.gate_level import cell_model

from .cocotb_checks import SIMS, check

NO_U_TURNS = {(i, o) for i in range(5) for o in range(5) if i != o}


@pytest.mark.parametrize("pairs", [NO_U_TURNS, NO_U_TURNS - {(0, 4), (4, 0)}],
                         ids=["no U-turns", "two outputs of three inputs"])
@pytest.mark.parametrize("sim", SIMS)
def test_pfumx_crossbar_on_the_primitives_model(sim, pairs, figure):
    """Every output copies the input its one-hot select names, and its first input for a zero
    select; outputs with other than four inputs stay AND-OR (zero for a zero select)."""
    name = "xbar_pfumx" if pairs == NO_U_TURNS else "xbar_pfumx_three"
    xbar = Crossbar(Wavelet, 5, 5, pairs=pairs, mux="pfumx")
    built = build(xbar, top=name, sim=sim, extra=cell_model("ecp5", "PFUMX"))
    result = run(built, module="wse.tb.crossbar_tests",
                 params={"width": Shape.cast(Wavelet).width, "n_in": 5, "n_out": 5,
                         "pairs": sorted(pairs), "cycles": 400, "seed": 7})
    check(result, figure, f"{sim}, {name}")


def _synthesise(component, name, tmp_path):
    """``synth_ecp5`` with the ULX3S's options on ``component``: its cell counts."""
    env = tool_environment()
    export_verilog(component, tmp_path / f"{name}.v", name=name)
    script = (f"read_verilog {name}.v; synth_ecp5 {BOARDS['ulx3s-85f'].synth_opts} -top {name}; "
              f"tee -q -o {name}.json stat -json")
    # in the folder, by relative names: YoWASP's Yosys sees the working directory's files
    subprocess.run([env["YOSYS"], "-q", "-p", script], env=env, cwd=tmp_path, check=True,
                   stdout=subprocess.DEVNULL)
    stat = json.loads((tmp_path / f"{name}.json").read_text())
    return stat["modules"][f"\\{name}"]["num_cells_by_type"]


@pytest.mark.xdist_group("gate_level")
def test_pfumx_crossbar_takes_two_lut4s_a_bit(tmp_path, figure):
    """A router's crossbar (5 outputs of 4 inputs, 38-bit wavelets): three LUT4s an output bit
    AND-OR, two and a PFUMX with the primitive (and a few for the selects' encoding)."""
    bits = 5 * 38
    and_or = _synthesise(Crossbar(Wavelet, 5, 5, pairs=NO_U_TURNS), "xbar_and_or", tmp_path)
    pfumx = _synthesise(Crossbar(Wavelet, 5, 5, pairs=NO_U_TURNS, mux="pfumx"), "xbar_pfumx",
                        tmp_path)
    assert and_or.get("PFUMX", 0) == 0 and and_or["LUT4"] >= 3 * bits
    assert pfumx["PFUMX"] == bits
    assert 2 * bits <= pfumx["LUT4"] <= 2 * bits + 10
    figure(f"crossbar 5x(4:1)x38 bits, synth_ecp5 {BOARDS['ulx3s-85f'].synth_opts}: AND-OR "
           f"{and_or['LUT4']} LUT4, PFUMX outputs {pfumx['LUT4']} LUT4 + {pfumx['PFUMX']} PFUMX")


def test_bad_crossbar_choices_are_refused_by_name():
    with pytest.raises(ValueError, match=r"^mux must be one of and_or, pfumx, not 'l6mux'$"):
        Crossbar(8, mux="l6mux")
    with pytest.raises(ValueError, match=r"^crossbar must be one of and_or, pfumx, not 'x'$"):
        Router(crossbar="x", u_turns=False)
    message = "crossbar='pfumx' builds 4-input outputs: it needs u_turns=False"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        Router(crossbar="pfumx")


@pytest.mark.xdist_group("gate_level")
def test_a_pfumx_with_a_constant_input_becomes_a_lut4(tmp_path):
    """The ECP5 builds' fixup after synthesis (``fpga.build.after_synth``): nextpnr cannot pack
    a PFUMX with a constant input (a crossbar at a mesh's edge), so it becomes the LUT4 it is,
    and one with no constant stays. Checked by Yosys's SAT solver against the original."""
    files, script = after_synth("ecp5")
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "two.v").write_text(
        "module two (input a, b, c, d, s, output y, z);\n"
        "    PFUMX edge (.ALUT(a), .BLUT(1'b0), .C0(s), .Z(y));\n"
        "    PFUMX inner (.ALUT(b), .BLUT(c), .C0(d), .Z(z));\n"
        "endmodule\n")
    env = tool_environment()
    models = "+/ecp5/cells_sim.v"       # Yosys's own ECP5 models, from its share directory
    yosys = (f"read_verilog -lib {models}; read_verilog two.v; hierarchy -top two; "
             f"copy two gold; select two; {script}; select -clear; "
             f"tee -q -o stat.json stat -json two; "
             f"techmap -autoproc -map {models}; opt -purge; "
             f"miter -equiv -flatten -make_assert gold two miter; hierarchy -top miter; "
             f"sat -verify -prove-asserts miter")
    subprocess.run([env["YOSYS"], "-q", "-p", yosys], env=env, cwd=tmp_path, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cells = json.loads((tmp_path / "stat.json").read_text())["modules"]["\\two"]
    assert cells["num_cells_by_type"] == {"LUT4": 1, "PFUMX": 1}
