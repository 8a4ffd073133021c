"""The FPGA figures README.md and docs show, from the ``wse build --json`` reports that
``make fpga-results`` keeps in ``bench/results/fpga_*.json``: which file holds each build
(:data:`SOURCES`), the figures (:data:`FIGURES`) and the tables (:data:`BLOCKS`).
:mod:`bench.figures` adds them to its own; :mod:`bench.render` puts them in the documents.

A board build is one JSON per seed (``fpga_<board>_<RxC>[_bf16]_seed<N>``); the seeds of a
board and mesh must come from one netlist (Yosys's cells the same), or rendering fails. A part
built alone is one JSON for all its seeds (``fpga_<part>_<device>``); the tile's breakdown by
module one more (``fpga_breakdown_<board>_<RxC>``).
"""

from .fpga_builds import (
    BOARD_BUILDS,
    BREAKDOWN_FILE,
    ECP5_STRETCH,
    ECP5_TARGETS,
    NOT_BUILT,
    PART_BUILDS,
    ROUTER_TARGETS,
    SOURCES,
    Error,
    block_unless_missing,
    board_builds,
    built,
    cell,
    cells_used,
    fmaxes,
    int16,
    lut_terms,
    met,
    mhz,
    minutes,
    n,
    not_built_labels,
    part_file,
    part_report,
    parts_built,
    reaches,
    seeds_text,
    targets,
    tools,
    unless_missing,
)

__all__ = ["BLOCKS", "FIGURES", "NOT_BUILT", "SOURCES"]


# -- the figures --------------------------------------------------------------------------------

_ROUTER_FILES = [part_file(*PART_BUILDS["router"][:2])]
_BF16_FILES = [BOARD_BUILDS["ulx3s_1x1_bf16"].file(1)]
_BREAKDOWN_FILES = [BREAKDOWN_FILE]

FIGURES = {
    "fpga.ulx3s_4x4.luts_per_pe": (lambda r: board_builds(r, "ulx3s_4x4")[0]["luts_per_pe"],
                                   "{:g}"),
    "fpga.ulx3s_4x4.fmax_min": (lambda r: min(fmaxes(r, "ulx3s_4x4")), "{:.2f}"),
    "fpga.ecp5_targets": (lambda r: ECP5_TARGETS, targets),
    "fpga.ecp5_targets_met": (lambda r: reaches(r, ECP5_TARGETS),
                              lambda v: "are met" if v else "are **not** met"),
    "fpga.ecp5_stretch": (lambda r: ECP5_STRETCH, targets),
    "fpga.ecp5_stretch_met": (lambda r: reaches(r, ECP5_STRETCH),
                              lambda v: "are met" if v else "are not"),
    "fpga.tools": (tools, "{}"),
    **{name: unless_missing(_ROUTER_FILES, figure) for name, figure in {
        "fpga.router.lut4_cells": (lambda r: part_report(r, "router")["lut4_cells"], n),
        "fpga.router.luts": (lambda r: part_report(r, "router")["luts"], n),
        "fpga.router.ccu2c": (lambda r: (part_report(r, "router")["luts"]
                                         - part_report(r, "router")["lut4_cells"]) // 2, n),
        "fpga.router.lutram": (lambda r: part_report(r, "router")["lutram"], n),
        "fpga.router.ffs": (lambda r: part_report(r, "router")["ffs"], n),
        "fpga.router.fmax_range": (lambda r: (part_report(r, "router")["fmax_mhz_min"],
                                              part_report(r, "router")["fmax_mhz_max"]),
                                   lambda v: f"{v[0]:.2f}–{v[1]:.2f}"),
        "fpga.router.targets_met": (
            lambda r: (part_report(r, "router")["lut4_cells"] <= ROUTER_TARGETS["lut4_cells"]
                       and part_report(r, "router")["fmax_mhz_min"] >= ROUTER_TARGETS["fmax_mhz"]),
            lambda v: "meets them" if v else "does **not** meet them"),
    }.items()},
}


# -- the generated blocks -----------------------------------------------------------------------

def _table(header, rows):
    return [f"| {' | '.join(header)} |", f"|{'|'.join(['---'] * len(header))}|",
            *(f"| {' | '.join(map(str, row))} |" for row in rows)]


def _summary_table(r):
    """README: each build's resources and clock."""
    rows = []
    for key in int16(built(r, BOARD_BUILDS)):
        spec = BOARD_BUILDS[key]
        label = spec.label
        b = board_builds(r, key)[0]
        fmax = fmaxes(r, key)
        rows.append((label, n(b["luts"]), n(b["ffs"]), b["brams"], b["dsps"],
                     f"{mhz(fmax)} MHz, {seeds_text(r, key)} ({b['target_mhz']:g} MHz clock: "
                     f"{'met' if met(r, key) else '**NOT met**'})", f"{b['luts_per_pe']:g}"))
    for key in parts_built(r):
        label = PART_BUILDS[key][3]
        p = part_report(r, key)
        rows.append((label, f"{n(p['luts'])} ({n(p['lut4_cells'])} `LUT4`; {p['lutram']} "
                            f"LUT-RAM cells)", n(p["ffs"]), "–", "–",
                     f"{mhz(p['fmax_mhz'])} MHz, seeds {' / '.join(map(str, p['seeds']))}", "–"))
    rows += [(label, NOT_BUILT, "", "", "", "", "") for label in not_built_labels(r)]
    return _table(("build", "LUTs", "FFs", "BRAMs", "DSPs", "fmax", "LUTs per PE"), rows)


def _builds_table(r):
    """docs/fpga.md: each build's command and every figure of its report."""
    rows = []
    for key in int16(built(r, BOARD_BUILDS)):
        spec = BOARD_BUILDS[key]
        builds = board_builds(r, key)
        b = builds[0]
        terms = lut_terms(b)
        rows.append((f"`{spec.command()}`",
                     f"**{n(b['luts'])} ({b['luts_per_pe']:g})**"
                     + (f": {terms}" if terms else ""),
                     n(b["ffs"]), b["brams"], b["dsps"], cells_used(b),
                     f"**{mhz(fmaxes(r, key))}** ({seeds_text(r, key)})",
                     f"{b['target_mhz']:g}", "yes" if met(r, key) else "**no**",
                     minutes([x["seconds"] for x in builds])))
    for key in parts_built(r):
        part, device, _, _ = PART_BUILDS[key]
        p = part_report(r, key)
        ccu = (p["luts"] - p["lut4_cells"]) // 2
        rows.append((f"`wse build --part {part} --device {device} --json`",
                     f"{n(p['luts'])}: {n(p['lut4_cells'])} `LUT4` + 2 x {ccu} `CCU2C`; "
                     f"{p['lutram']} LUT-RAM cells", n(p["ffs"]), p["brams"] or "–",
                     p["dsps"] or "–", "out of context",
                     f"**{mhz(p['fmax_mhz'])}** (seeds {' / '.join(map(str, p['seeds']))})",
                     "100", "yes" if all(f >= 100 for f in p["fmax_mhz"]) else "no",
                     minutes([p["seconds"]]) + " (all seeds)"))
    rows += [(label, NOT_BUILT, "", "", "", "", "", "", "", "") for label in not_built_labels(r)]
    return _table(("command", "LUTs (a PE)", "FFs", "BRAMs", "DSPs", "cells used / device",
                   "fmax MHz", "target", "met", "build time"), rows)


def _critical_paths_table(r):
    """docs/fpga.md: where each board build's clock is limited, per seed."""
    rows = []
    for key in built(r, BOARD_BUILDS):
        spec = BOARD_BUILDS[key]
        for b in board_builds(r, key):
            path = b["critical_path"]
            if path is None:
                continue
            name = f"{spec.board} {spec.mesh}" + (" bf16" if spec.fmt == "bf16" else "")
            rows.append((name, b["seed"], cell(path["from"]), cell(path["to"]),
                         f"{path['delay_ns']:.2f}",
                         f"{path['routing_ns']:.2f} ({path['routing_ns'] / path['delay_ns']:.0%})"))
    return _table(("build", "seed", "from", "to", "ns", "of it wires"), rows)


def _bf16_table(r):
    """docs/fpga.md: the ULX3S 1x1 in int16 and in bf16."""
    rows = []
    for key in ("ulx3s_1x1", "ulx3s_1x1_bf16"):
        b = board_builds(r, key)[0]
        rows.append((BOARD_BUILDS[key].fmt, f"`{BOARD_BUILDS[key].command(b['seed'])}`",
                     n(b["luts"]), n(b["ffs"]), b["dsps"], f"**{b['fmax_mhz']:.2f}**",
                     f"{b['target_mhz']:g}", "yes" if b["timing_met"] else "**no**"))
    int16, bf16 = _bf16_pair(r)
    return [*_table(("format", "command", "LUTs", "FFs", "DSPs", "fmax MHz", "target", "met"),
                    rows), "",
            f"bf16 takes {n(bf16['luts'] - int16['luts'])} LUT4 places more than int16 and runs "
            f"at {bf16['fmax_mhz'] / int16['fmax_mhz']:.0%} of its clock."]


def _bf16_pair(r):
    return board_builds(r, "ulx3s_1x1")[0], board_builds(r, "ulx3s_1x1_bf16")[0]


#: The breakdown's rows: a label and the modules in it, by their path under the tile module
#: (``core.acc`` takes ``core.acc`` and what is inside it; ``router.input_`` every input unit;
#: ``router`` what is left of the router; ``*`` what is left). Each module is in the first row
#: that takes it.
BREAKDOWN_ROWS = (
    ("router: crossbar (5 outputs x 4 inputs x 38 bits, two LUT4s and a `PFUMX` a bit, and the "
     "selects' encoding)", ("router.crossbar",)),
    ("router: route state (positions, per-color state, five per-port route copies in LUT RAM, "
     "the update engine and its arbiter)", ("router.route_state",)),
    ("router: five input units (arrival lookup and decisions, the queues in one LUT RAM, the "
     "head, the update slot)", ("router.input_",)),
    ("router: its own logic (output registers, drop counter) and the allocator", ("router",)),
    ("core: accumulator buffers (LUT RAM, `held` bits, the engine's words) and the CR FIFO",
     ("core.acc", "core.cr")),
    ("core: partial-sum engine", ("core.psum",)),
    ("core: counter bank, READ engine", ("core.counters", "core.read")),
    ("core: dispatcher and glue, the lane and its MAC, the sorter and its FIFOs", ("core",)),
    ("tile: ramp accept per input (`cmd` or other), psum bypass, and any other part", ("*",)),
)


def _takes(prefix, path):
    """Whether a row's module ``prefix`` takes the module at ``path`` (see BREAKDOWN_ROWS)."""
    if prefix == "*":
        return True
    if not prefix or not prefix.endswith("_"):     # (``read$168``: a name Amaranth made unique)
        return path == prefix or bool(prefix) and path.startswith((prefix + ".", prefix + "$"))
    return path.startswith(prefix)


def _breakdown_rows(r):
    """``[(label, {"luts", "lutram", "ffs"})]``: the breakdown's modules summed by row."""
    modules = r[BREAKDOWN_FILE]["modules"]
    top = min(modules, key=len)                 # the tile module, e.g. "wse_tile"
    sums = [(label, {"luts": 0, "lutram": 0, "ffs": 0}) for label, _ in BREAKDOWN_ROWS]
    for module, figures in modules.items():
        path = module.removeprefix(top).removeprefix(".")
        for (_, prefixes), (_, total) in zip(BREAKDOWN_ROWS, sums):
            if any(_takes(prefix, path) for prefix in prefixes):
                for key in total:
                    total[key] += figures[key]
                break
        else:
            raise Error(f"the breakdown's module {module!r} is in no row of BREAKDOWN_ROWS "
                         f"(bench/figures_fpga.py)")
    return sums


def _breakdown_table(r):
    """docs/fpga.md: where the tile's logic goes, and how much of it is the router's."""
    rows = _breakdown_rows(r)
    luts, lutram = _breakdown_total(r, "luts"), _breakdown_total(r, "lutram")
    router = sum(t["luts"] for label, t in rows if label.startswith("router"))
    return [f"{n(luts)} LUT4 places in all, {n(4 * lutram)} of them in {n(lutram)} LUT-RAM "
            f"cells; the router {n(router)} ({router / luts:.0%}):", "",
            *_table(("module", "LUT4 places / LUT-RAM cells / FFs"),
                    [(label, f"{t['luts']} / {t['lutram']} / {t['ffs']}") for label, t in rows])]


def _breakdown_total(r, key):
    return sum(f[key] for f in r[BREAKDOWN_FILE]["modules"].values())


def _sources_rows(r):
    """docs/results.md: the rows of its table of files for the FPGA builds' JSON."""
    return [f"| `{name}.json` | `{command.removesuffix(' (make fpga-results)')}` |"
            for name, command in SOURCES.items()]


BLOCKS = {
    "fpga.bf16": block_unless_missing(_BF16_FILES, _bf16_table),
    "fpga.breakdown": block_unless_missing(_BREAKDOWN_FILES, _breakdown_table),
    "fpga.sources": _sources_rows,
    "fpga.summary": _summary_table,
    "fpga.builds": _builds_table,
    "fpga.critical_paths": _critical_paths_table,
}
