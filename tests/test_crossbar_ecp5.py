"""What the ECP5 builds make of the crossbar of binary multiplexers (``mux="binary"``, the
ULX3S's routers): each 4:1 output as two LUT4s and the slice's ``PFUMX`` a bit
(``fpga.build.before_lut_mapping``), the techmap proved equivalent to what it replaces, and a
``PFUMX`` with a constant input turned back into logic for ABC9 (nextpnr cannot pack one).
Both crossbars' behaviour is tested in Amaranth's simulator in ``tests/test_router_parts.py``;
a tile with the ULX3S's router runs on both simulators in ``tests/test_tile_cocotb.py``."""

import json
import subprocess

import pytest

from wse.fpga.boards import BOARDS
from wse.fpga.build import ECP5_MUX4, synth_script, tool_environment
from wse.rtl.crossbar import Crossbar
from wse.rtl.router import Router
from wse.rtl.wavelet import Wavelet
from wse.sim.export import export_verilog

from .test_router_parts import NO_U_TURNS

#: One worker's, beside the other Yosys runs of the gate-level tests.
pytestmark = pytest.mark.xdist_group("gate_level")



def _yosys(script, cwd):
    env = tool_environment()
    subprocess.run([env["YOSYS"], "-q", "-p", script], env=env, cwd=cwd, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _synthesise(component, name, tmp_path):
    """The ULX3S's synthesis of ``component`` (``synth_ecp5 -nowidelut`` with the steps before
    LUT mapping): its cell counts."""
    synth = f"synth_ecp5 {BOARDS['ulx3s-85f'].synth_opts} -top {name}"
    files, stop, after = synth_script("ecp5", synth)
    for filename, text in files.items():
        (tmp_path / filename).write_text(text)
    export_verilog(component, tmp_path / f"{name}.v", name=name)
    # by relative names: YoWASP's Yosys sees the working directory's files
    _yosys("; ".join([f"read_verilog {name}.v", f"{synth} {stop}", *after,
                      f"tee -q -o {name}.json stat -json"]), tmp_path)
    stat = json.loads((tmp_path / f"{name}.json").read_text())
    return stat["modules"][f"\\{name}"]["num_cells_by_type"]


def test_a_binary_crossbar_takes_two_lut4s_a_bit_on_the_ecp5(tmp_path, figure):
    """A router's crossbar (5 outputs of 4 inputs, 38-bit wavelets): three LUT4s an output bit
    AND-OR, two and a PFUMX binary (and a few for the selects' encoding)."""
    bits = 5 * 38
    and_or = _synthesise(Crossbar(Wavelet, 5, 5, pairs=NO_U_TURNS), "xbar_and_or", tmp_path)
    binary = _synthesise(Crossbar(Wavelet, 5, 5, pairs=NO_U_TURNS, mux="binary"),
                         "xbar_binary", tmp_path)
    assert and_or.get("PFUMX", 0) == 0 and and_or["LUT4"] >= 3 * bits
    assert binary["PFUMX"] == bits
    assert 2 * bits <= binary["LUT4"] <= 2 * bits + 10
    figure(f"crossbar 5x(4:1)x38 bits, synth_ecp5 {BOARDS['ulx3s-85f'].synth_opts}: AND-OR "
           f"{and_or['LUT4']} LUT4, binary {binary['LUT4']} LUT4 + {binary['PFUMX']} PFUMX")


def test_the_ecp5_mux4_techmap_is_what_it_replaces(tmp_path):
    """A full 4:1 tree becomes two LUT4s (2:1 multiplexers) and a PFUMX; a PFUMX with a
    constant input becomes a multiplexer, one without stays. Each proved equivalent to the
    original by Yosys's SAT solver on Yosys's own ECP5 models."""
    (tmp_path / "mux4.techmap").write_text(ECP5_MUX4)
    (tmp_path / "cases.v").write_text(
        "module cases (input a, b, c, d, e, f, g, s, t, output x, y, z);\n"
        "    assign x = t ? (s ? d : c) : (s ? b : a);\n"
        "    PFUMX edge (.ALUT(e), .BLUT(1'b0), .C0(s), .Z(y));\n"
        "    PFUMX inner (.ALUT(f), .BLUT(g), .C0(t), .Z(z));\n"
        "endmodule\n")
    models = "+/ecp5/cells_sim.v"       # from Yosys's share directory
    _yosys(f"read_verilog -lib {models}; read_verilog cases.v; hierarchy -top cases; proc; "
           f"techmap; opt_clean; copy cases gold; select cases; "
           f"muxcover -mux4 -nodecode -nopartial; techmap -map mux4.techmap; select -clear; "
           f"tee -q -o stat.json stat -json cases; techmap -autoproc -map {models}; opt -purge; "
           f"miter -equiv -flatten -make_assert gold cases miter; hierarchy -top miter; "
           f"sat -verify -prove-asserts miter", tmp_path)
    cells = json.loads((tmp_path / "stat.json").read_text())["modules"]["\\cases"]
    # x: a PFUMX fed by two LUT4s (2:1 multiplexers); y: a multiplexer; z: its PFUMX
    assert cells["num_cells_by_type"] == {"LUT4": 2, "$_MUX_": 1, "PFUMX": 2}


def test_bad_crossbar_choices_are_refused_by_name():
    with pytest.raises(ValueError, match=r"^mux must be one of and_or, binary, not 'pfumx'$"):
        Crossbar(8, mux="pfumx")
    with pytest.raises(ValueError, match=r"^crossbar must be one of and_or, binary, not 'x'$"):
        Router(crossbar="x", u_turns=False)
    with pytest.raises(ValueError, match=r"^crossbar='binary' builds 4-input outputs: it needs "
                                         r"u_turns=False$"):
        Router(crossbar="binary")
