"""Bitstream builds: a board top through Yosys and nextpnr, and the report of what it cost.

:func:`build` elaborates :class:`~fpga.top.BoardTop` for a board and a mesh, runs the
``amaranth-boards`` platform's build script with the tools chosen in ``sim/toolchain.env``
(YoWASP by default), and returns the figures: cells from Yosys, fmax and utilisation from
nextpnr. Everything a build writes (RTLIL, scripts, the Yosys log ``top.rpt``, the nextpnr log
``top.tim``, both reports, the bitstream and ``build.json``) stays in its own directory,
``<out>/<board>-<R>x<C>/``.

A mesh of more than one tile is synthesised hierarchically: every position instantiates the one
tile module :data:`~fabric.mesh.TILE_MODULE`, which is marked ``keep_hierarchy`` so that Yosys
maps it once (ABC9 sees one tile, not ``rows x cols`` of them flattened together) while the
board top around it is flattened as usual; nextpnr reads the hierarchical netlist and flattens
it itself. The price is that a kept tile cannot fold its straps (routes, colors, row: inputs of
the module) or drop its unused edge ports, which a flattened build does per position.
"""

import hashlib
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

from wse.fabric.mesh import TILE_MODULE
from wse.sim import toolchain

from .boards import board as find_board
from .boards import mesh_config
from .report import fit_error, read_reports, source_commit, tool_versions
from .top import BoardTop

__all__ = ["BuildError", "build", "before_lut_mapping", "run_script", "synth_script",
           "tool_environment", "synthesis_digest", "DEFAULT_OUT"]

DEFAULT_OUT = Path("build") / "fpga"

#: The platform's bitstream file, per family.
_BITSTREAM = {"ice40": "top.bin", "ecp5": "top.bit"}
#: The variable of ``sim/toolchain.env`` naming nextpnr, per family.
_NEXTPNR = {"ice40": "NEXTPNR_ICE40", "ecp5": "NEXTPNR_ECP5"}


#: The ECP5's 4:1 multiplexers (a ``crossbar="binary"`` router's outputs, and any other full
#: tree of 2:1 ones that Yosys's ``muxcover`` finds, as ``$_MUX4_``) become two 2:1
#: multiplexers, a LUT4 each, into the slice's own multiplexer, the ``PFUMX`` (``Z = C0 ?
#: ALUT : BLUT``): two LUT4s a bit where ABC9 without wide LUTs (``-nowidelut``) makes three.
#: The LUT4s are instances, not logic for ABC9: nextpnr packs a PFUMX only with LUT4s driving
#: it, and with wide LUTs ABC9 would drive one from another PFUMX.
#: And a ``PFUMX`` with a constant input becomes a plain multiplexer again, for ABC9 to fold:
#: nextpnr 0.11.1's packer stops on one ("INTERNAL CHECK FAILED" on ``$PACKER_GND``).
ECP5_MUX4 = """\
(* techmap_celltype = "$_MUX4_" *)
module _wse_mux4 (input A, B, C, D, S, T, output Y);
    wire ab, cd;       // LUT4 Z = INIT[{D, C, B, A}]: 16'hCACA is C ? B : A
    LUT4 #(.INIT(16'hCACA)) low (.A(A), .B(B), .C(S), .D(1'b0), .Z(ab));
    LUT4 #(.INIT(16'hCACA)) high (.A(C), .B(D), .C(S), .D(1'b0), .Z(cd));
    PFUMX _TECHMAP_REPLACE_ (.ALUT(cd), .BLUT(ab), .C0(T), .Z(Y));
endmodule

(* techmap_celltype = "PFUMX" *)
module _wse_pfumx_constants (input ALUT, BLUT, C0, output Z);
    parameter _TECHMAP_CONSTMSK_ALUT_ = 1'b0;
    parameter _TECHMAP_CONSTMSK_BLUT_ = 1'b0;
    parameter _TECHMAP_CONSTMSK_C0_ = 1'b0;
    wire _TECHMAP_FAIL_ = !(_TECHMAP_CONSTMSK_ALUT_ || _TECHMAP_CONSTMSK_BLUT_ ||
                            _TECHMAP_CONSTMSK_C0_);
    \\$_MUX_ _TECHMAP_REPLACE_ (.A(BLUT), .B(ALUT), .S(C0), .Y(Z));
endmodule
"""


def before_lut_mapping(family):
    """``(files, commands)``: files to write beside a ``family`` build (``{name: text}``) and the
    Yosys commands to run when its synthesis has stopped before it maps LUTs (``synth_<family>
    ... -run :map_luts``, then these, then ``-run map_luts:``); none on the iCE40. On the
    ECP5, by then flattened and optimised (constants folded), full trees of four 2:1
    multiplexers become ``$_MUX4_`` (``muxcover -mux4 -nodecode -nopartial``: only where that
    costs no more) and :data:`ECP5_MUX4` maps them."""
    if family != "ecp5":
        return {}, []
    # a name Amaranth's platform does not read as a source (it reads .v, .sv, .il)
    name = "mux4.techmap"
    return {name: ECP5_MUX4}, ["muxcover -mux4 -nodecode -nopartial", f"techmap -map {name}",
                               "opt_expr", f"techmap -map {name}", "opt_clean"]


def synth_script(family, synth):
    """``(files, stop, after)``: ``synth`` (a Yosys command such as ``"synth_ecp5 -nowidelut
    -top top"``) with :func:`before_lut_mapping`'s steps: its files, the options that stop
    ``synth`` before LUT mapping (``""`` when there are no steps), and the commands to run after
    it (the steps, then ``synth`` again from the LUT mapping on)."""
    files, steps = before_lut_mapping(family)
    if not steps:
        return files, "", []
    return files, "-run :map_luts", [*steps, f"{synth} -run map_luts:"]


#: Where a build's folder keeps the digest of what its netlist was synthesised from.
_SYNTHESIS_STAMP = "synthesis.sha256"


#: An RTLIL source location (``attribute \src "/path/to/rtl/core.py:71"``): where the checkout
#: is, not what the netlist is.
_SOURCE_LOCATION = re.compile(rb'^ *attribute \\src "[^"\n]*"\n', re.MULTILINE)


def synthesis_digest(files, yosys):
    """A digest of what Yosys reads (every file of the build plan but its scripts and the pin
    constraints, which only nextpnr and the packer read, the seed being in the script; and
    without the RTLIL's source locations, so that a checkout elsewhere digests the same) and of
    the Yosys that reads it (``{"command", "version"}``)."""
    digest = hashlib.sha256(json.dumps(yosys, sort_keys=True).encode())
    for name in sorted(files):
        if name.startswith("build_") or name.endswith((".lpf", ".pcf", ".sdc")):
            continue
        content = files[name]
        content = content if isinstance(content, bytes) else content.encode()
        digest.update(name.encode() + b"\0")
        digest.update(_SOURCE_LOCATION.sub(b"", content) if name.endswith(".il") else content)
        digest.update(b"\0")
    return digest.hexdigest()


def _reuse_synthesis(build_dir, script, digest):
    """Whether the netlist in ``build_dir`` was synthesised from what ``digest`` says
    (:func:`synthesis_digest`); if so the build ``script`` skips Yosys and places it again
    (Yosys writes the same netlist whatever nextpnr's seed: seeds after the first take
    nextpnr's time alone, and come from one netlist). If not, the stale netlist's figures go."""
    stamp = build_dir / _SYNTHESIS_STAMP
    reuse = (stamp.is_file() and stamp.read_text().strip() == digest
             and (build_dir / "top.json").is_file() and (build_dir / "stat.json").is_file())
    if not reuse:
        stamp.unlink(missing_ok=True)
        (build_dir / "stat.json").unlink(missing_ok=True)
        return False
    path = build_dir / script
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(line for line in lines if not line.startswith('"$YOSYS"')))
    return True


class BuildError(RuntimeError):
    """A build that failed: the design does not fit, a tool failed, or it ran out of time."""


def tool_environment():
    """Put ``sim/toolchain.env``'s choices into ``os.environ`` where not already set (Amaranth
    runs Yosys in this process for Verilog) and return a copy for the tools' processes."""
    for name, value in toolchain.settings().items():
        os.environ.setdefault(name, value)
    return dict(os.environ)


def _environment(board):
    """The build's environment: ours, the toolchain's choices and the board's extras."""
    env = tool_environment()
    env.update({k: v for k, v in board.env.items() if k not in os.environ})
    return env


def run_script(script, cwd, env, timeout, log):
    """Run the build script; kill its whole process group when it overruns ``timeout``."""
    with open(log, "w") as out:
        proc = subprocess.Popen(["sh", script], cwd=cwd, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise BuildError(f"build did not finish in {timeout:g} s (log: {log})") from None


def build(board_name, mesh=None, *, out=DEFAULT_OUT, clk_hz=None, seed=1, timeout=None,
          keep_tiles=None, **overrides):
    """Build the bitstream of a ``mesh = (rows, cols)`` mesh on board ``board_name``.

    ``mesh`` defaults to the board's default; ``overrides`` change its core parameters
    (:class:`~fabric.config.MeshConfig` fields); ``clk_hz`` the target clock (the board's by
    default); ``timeout`` bounds the tools' wall time in seconds; ``keep_tiles`` synthesises the
    tile module once and keeps it as a module (the default for meshes of more than one tile,
    see the module docstring) instead of flattening every tile into the top.

    Returns a dict: ``board``, ``mesh`` (``"RxC"``), ``config`` (the core parameters),
    ``bitstream`` (path), ``luts``, ``ffs``, ``brams``, ``sprams``, ``dsps`` (synthesised
    cells, see :data:`fpga.report.CELLS`), ``cells`` (Yosys's count of every cell type),
    ``fmax_mhz``, ``target_mhz``, ``timing_met`` (the limiting clock), ``clocks`` (every clock
    nextpnr timed, its fmax and target), ``critical_path`` (the limiting clock's: first and
    last cell, delay, of it wires), ``luts_per_pe``, ``utilisation`` (nextpnr's, per resource),
    ``hierarchical`` (whether the tiles were kept), ``seed``, ``synthesis_reused`` (whether
    Yosys's netlist of an earlier build in ``build_dir`` was placed again: see
    :func:`_reuse_synthesis`), ``tools`` (commands and versions
    of Yosys and nextpnr, versions of Amaranth and amaranth-boards), ``commit`` (the source's,
    ``-dirty`` when the RTL or the build differs from it; ``None`` outside git), ``seconds``
    and ``build_dir``.
    Raises :class:`BuildError` when the design does not fit (naming the resource, used against
    available) or a tool fails.
    """
    board = find_board(board_name)
    rows, cols = board.default_mesh if mesh is None else mesh
    config = mesh_config(board, rows, cols, **overrides)
    suffix = "-bf16" if config.fmt.is_float else ""
    build_dir = Path(out) / f"{board.name}-{rows}x{cols}{suffix}"
    build_dir.mkdir(parents=True, exist_ok=True)
    for stale in ("report.json", "build.json", _BITSTREAM[board.family]):
        (build_dir / stale).unlink(missing_ok=True)
    env = _environment(board)
    commit = source_commit()
    tools = tool_versions(env["YOSYS"], env[_NEXTPNR[board.family]])
    started = time.monotonic()

    platform = board.platform()
    top = BoardTop(board, config, clk_hz=clk_hz)
    files = top.verilog_files()
    # the platform's script runs `synth_<family> <synth_opts> -top top`, then ours
    fixups, stop, after = synth_script(board.family,
                                       f"synth_{board.family} {board.synth_opts} -top top")
    for filename, text in {**files, **fixups}.items():
        platform.add_file(filename, text)
    if keep_tiles is None:
        keep_tiles = rows * cols > 1 and board.keep_tiles
    keep_tiles = bool(keep_tiles) and bool(files)
    hierarchy = ({"script_after_read": f"setattr -mod -set keep_hierarchy 1 {TILE_MODULE}"}
                 if keep_tiles else {})
    plan = platform.build(
        top, name="top", build_dir=str(build_dir), do_build=False,
        synth_opts=f"{board.synth_opts} {stop}".strip(), **hierarchy,
        script_after_synth="\n".join([*after, "tee -q -o stat.json stat -json"]),
        nextpnr_opts=" ".join(filter(None, (board.nextpnr_opts, "--report report.json",
                                            f"--timing-allow-fail --seed {int(seed)}"))))
    plan.extract(str(build_dir))
    digest = synthesis_digest(plan.files, tools["yosys"])
    reused = _reuse_synthesis(build_dir, f"{plan.script}.sh", digest)
    log = build_dir / "build.log"
    code = run_script(f"{plan.script}.sh", build_dir, env, timeout, log)
    seconds = time.monotonic() - started
    if code != 0:
        tim = build_dir / "top.tim"
        reason = fit_error(tim.read_text()) if tim.exists() else None
        if reason is None:      # a tool before nextpnr failed: its last words
            lines = [line.strip() for line in log.read_text(errors="replace").splitlines()
                     if line.strip()]
            reason = lines[-1] if lines else None
        where = f"{rows}x{cols} mesh on {board.name} ({board.device})"
        if reason is not None and "used" in reason:
            raise BuildError(f"{where} does not fit: {reason} (log: {tim})")
        raise BuildError(f"{where}: build failed ({reason or 'see the log'}; log: {log})")

    (build_dir / _SYNTHESIS_STAMP).write_text(digest + "\n")
    figures = read_reports(build_dir, board.family)
    bitstream = build_dir / _BITSTREAM[board.family]
    target_mhz = top.clk_hz / 1e6
    fmax = figures["fmax_mhz"]
    result = {
        "board": board.name,
        "device": board.device,
        "mesh": f"{rows}x{cols}",
        "config": {k: v for k, v in config.to_dict().items() if k not in ("rows", "cols")},
        "bitstream": str(bitstream),
        "luts": figures["luts"],
        "ffs": figures["ffs"],
        "brams": figures["brams"],
        "sprams": figures["sprams"],
        "dsps": figures["dsps"],
        "cells": figures["cells"],
        "fmax_mhz": None if fmax is None else round(fmax, 2),
        "target_mhz": round(target_mhz, 3),
        "timing_met": fmax is not None and fmax >= target_mhz,
        "clocks": figures["clocks"],
        "critical_path": figures["critical_path"],
        "luts_per_pe": round(figures["luts"] / (rows * cols), 1),
        "utilisation": figures["utilisation"],
        "hierarchical": keep_tiles,
        "seed": int(seed),
        "synthesis_reused": reused,
        "tools": tools,
        "commit": commit,
        "seconds": round(seconds, 1),
        "build_dir": str(build_dir),
    }
    (build_dir / "build.json").write_text(json.dumps(result, indent=2) + "\n")
    return result
