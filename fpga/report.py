"""Reading a build's reports: Yosys's cell statistics and nextpnr's utilisation and fmax.

The platform build writes ``stat.json`` (Yosys ``stat -json`` after synthesis, through the
``script_after_synth`` hook), ``report.json`` (nextpnr ``--report``) and ``top.tim`` (nextpnr's
log). :func:`read_reports` turns them into the figures ``wse build`` prints; :func:`fit_error`
reads the log of a failed place-and-route for the resource that ran out; :func:`tool_versions`
and :func:`source_commit` say what made a build, for the results kept in ``bench/results/``.
"""

import json
import re
import subprocess
import tempfile
from importlib import metadata
from pathlib import Path

__all__ = ["CELLS", "cell_counts", "clock_report", "critical_path", "fit_error",
           "nextpnr_report", "read_reports", "source_commit", "tool_versions"]

#: Yosys cell types counted as each figure, per family, with their weights. ``luts`` is what a
#: mesh build reports: the LUT4 places the logic takes (an ECP5 carry cell, ``CCU2C``, holds two
#: LUT4s, a distributed RAM, ``TRELLIS_DPR16X4``, four). A part built alone reports LUT4 logic
#: (``logic_luts``: carries included, distributed RAM not) and the distributed RAMs apart
#: (``lutram``, in cells), the figures the peers' routers are compared in.
CELLS = {
    "ice40": {
        "luts": {"SB_LUT4": 1},
        "logic_luts": {"SB_LUT4": 1},
        "lutram": {},
        "ffs": "SB_DFF",
        "brams": {"SB_RAM40_4K": 1},
        "sprams": {"SB_SPRAM256KA": 1},
        "dsps": {"SB_MAC16": 1},
    },
    "ecp5": {
        "luts": {"LUT4": 1, "CCU2C": 2, "TRELLIS_DPR16X4": 4},
        "logic_luts": {"LUT4": 1, "CCU2C": 2},
        "lutram": {"TRELLIS_DPR16X4": 1},
        "ffs": "TRELLIS_FF",
        "brams": {"DP16KD": 1, "PDPW16KD": 1},
        "sprams": {},
        "dsps": {"MULT18X18D": 1, "ALU54B": 1},
    },
}


def cell_counts(stat, family):
    """``{"luts", "logic_luts", "lutram", "ffs", "brams", "sprams", "dsps", "cells"}`` from Yosys
    ``stat -json`` (``cells``: every cell type's count; the others per :data:`CELLS`)."""
    design = stat.get("design") or next(iter(stat["modules"].values()))
    cells = {name: int(n) for name, n in design.get("num_cells_by_type", {}).items()}
    kinds = CELLS[family]
    counts = {"cells": cells}
    for figure, weights in kinds.items():
        if isinstance(weights, dict):
            counts[figure] = sum(cells.get(name, 0) * weight for name, weight in weights.items())
    counts["ffs"] = sum(n for name, n in cells.items() if name.startswith(kinds["ffs"]))
    return counts


def nextpnr_report(report):
    """``(fmax_mhz, constraint_mhz, utilisation)`` from nextpnr's ``--report`` JSON.

    With several clocks, the figure is that of the clock with the least slack relative to its
    constraint (the one that limits the design); ``fmax_mhz`` is ``None`` when nextpnr timed no
    clock (a design without registers).
    """
    utilisation = {name: {"used": int(v["used"]), "available": int(v["available"])}
                   for name, v in report.get("utilization", {}).items()}
    clocks = [(float(v["achieved"]), float(v["constraint"]))
              for v in report.get("fmax", {}).values()]
    if not clocks:
        return None, None, utilisation
    achieved, constraint = min(clocks, key=lambda c: c[0] / c[1])
    return achieved, constraint, utilisation


def clock_report(report):
    """``{clock: {"fmax_mhz", "target_mhz"}}``: every clock nextpnr timed (``--report`` JSON),
    its achieved frequency and its constraint."""
    return {name: {"fmax_mhz": round(float(v["achieved"]), 2),
                   "target_mhz": round(float(v["constraint"]), 3)}
            for name, v in report.get("fmax", {}).items()}


def critical_path(report, clock):
    """The critical path of ``clock`` (register to register, from nextpnr's ``--report``
    JSON): ``{"from", "to", "delay_ns", "routing_ns"}``, the cells it starts and ends at, its
    delay and how much of it is wires; ``None`` when nextpnr reported none for that clock."""
    edge = f"posedge {clock}"
    for entry in report.get("critical_paths", []):
        steps = entry.get("path") or []
        if entry.get("from") == edge and entry.get("to") == edge and steps:
            return {"from": steps[0]["from"]["cell"], "to": steps[-1]["to"]["cell"],
                    "delay_ns": round(sum(float(s["delay"]) for s in steps), 2),
                    "routing_ns": round(sum(float(s["delay"]) for s in steps
                                            if s["type"] == "routing"), 2)}
    return None


def read_reports(build_dir, family):
    """The figures of a finished build in ``build_dir`` (see the module docstring):
    :func:`cell_counts`, the limiting clock's ``fmax_mhz`` and ``constraint_mhz``,
    ``utilisation``, ``clocks`` (:func:`clock_report`) and the limiting clock's
    ``critical_path``."""
    stat = json.loads((build_dir / "stat.json").read_text())
    figures = cell_counts(stat, family)
    report = json.loads((build_dir / "report.json").read_text())
    fmax, constraint, utilisation = nextpnr_report(report)
    clocks = clock_report(report)
    limiting = next((name for name, v in report.get("fmax", {}).items()
                     if float(v["achieved"]) == fmax and float(v["constraint"]) == constraint),
                    None)
    figures.update(fmax_mhz=fmax, constraint_mhz=constraint, utilisation=utilisation,
                   clocks=clocks,
                   critical_path=None if limiting is None else critical_path(report, limiting))
    return figures


#: How each tool is asked its version, and where the version is in its answer (``Yosys 0.70
#: (git sha1 28ba3cb92, ...)``; ``... (Version nextpnr-0.11.1)``).
_VERSIONS = {"yosys": ("-V", re.compile(r"Yosys (\S+)(?: \(git sha1 ([0-9a-f]+))?")),
             "nextpnr": ("--version", re.compile(r"Version nextpnr-([^)\s]+)()"))}


def _tool_version(command, tool):
    """What ``command`` says its version is (``None`` if it does not say)."""
    flag, pattern = _VERSIONS[tool]
    try:
        with tempfile.TemporaryDirectory() as scratch:      # a tool may write where it runs
            run = subprocess.run([command, flag], cwd=scratch, capture_output=True, text=True,
                                 timeout=300)
    except (OSError, subprocess.SubprocessError):
        return None
    found = pattern.search(run.stdout + run.stderr)
    if found is None:
        return None
    version, sha = found.groups()
    return f"{version} (git sha1 {sha})" if sha else version


def tool_versions(yosys, nextpnr):
    """``{"yosys": {"command", "version"}, "nextpnr": {...}, "amaranth": {"version"},
    "amaranth-boards": {"version"}}``: the tools a build ran (``yosys``, ``nextpnr``: the
    commands, as ``sim/toolchain.env`` chose them) and the Python packages that wrote its
    RTLIL and its platform's script. A version nobody states is ``None``."""
    def package(name):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None
    return {"yosys": {"command": yosys, "version": _tool_version(yosys, "yosys")},
            "nextpnr": {"command": nextpnr, "version": _tool_version(nextpnr, "nextpnr")},
            "amaranth": {"version": package("amaranth")},
            "amaranth-boards": {"version": package("amaranth-boards")}}


#: What makes a netlist: the RTL, the mesh around it, the board tops and their build, the tools.
_SOURCES = ("rtl", "fabric", "fpga", "sim/toolchain.env")
#: The checkout this module is in (the repository's root in an editable install).
_ROOT = Path(__file__).resolve().parents[1]


def source_commit(root=_ROOT):
    """The git commit of the checkout at ``root`` a build was made from, ``-dirty`` appended
    when what makes a netlist (:data:`_SOURCES`) differs from it; ``None`` outside a git
    checkout (an installed package)."""
    def git(*args):
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              timeout=60)
    try:
        head = git("rev-parse", "HEAD")
        if head.returncode != 0:
            return None
        status = git("status", "--porcelain", "--", *_SOURCES)
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("-dirty" if status.stdout.strip() else "")


_UTILISATION = re.compile(r"^Info:\s+(\w+):\s+(\d+)/\s*(\d+)\s+(\d+)%", re.MULTILINE)


def fit_error(log_text):
    """What a failed place-and-route ran out of, in words, or ``None`` if it is not that.

    nextpnr prints the device utilisation before it places; a resource used beyond what the
    device has is the reason the design does not fit.
    """
    over = [(name, int(used), int(available))
            for name, used, available, _ in _UTILISATION.findall(log_text)
            if int(used) > int(available)]
    if over:
        return "; ".join(f"{name} {used} used, {available} available" for name, used, available
                         in over)
    errors = [line for line in log_text.splitlines() if line.startswith("ERROR:")]
    return errors[-1][len("ERROR:"):].strip() if errors else None
