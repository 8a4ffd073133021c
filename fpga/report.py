"""Reading a build's reports: Yosys's cell statistics and nextpnr's utilisation and fmax.

The platform build writes ``stat.json`` (Yosys ``stat -json`` after synthesis, through the
``script_after_synth`` hook), ``report.json`` (nextpnr ``--report``) and ``top.tim`` (nextpnr's
log). :func:`read_reports` turns them into the figures ``wse build`` prints; :func:`fit_error`
reads the log of a failed place-and-route for the resource that ran out.
"""

import json
import re

__all__ = ["CELLS", "cell_counts", "nextpnr_report", "read_reports", "fit_error"]

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


def read_reports(build_dir, family):
    """The figures of a finished build in ``build_dir`` (see the module docstring)."""
    stat = json.loads((build_dir / "stat.json").read_text())
    figures = cell_counts(stat, family)
    fmax, constraint, utilisation = nextpnr_report(
        json.loads((build_dir / "report.json").read_text()))
    figures.update(fmax_mhz=fmax, constraint_mhz=constraint, utilisation=utilisation)
    return figures


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
