"""The FPGA builds the docs quote (``make fpga-results``) and how their figures read: which
JSON in ``bench/results/`` holds each build, the accessors that say whether it was built, and
the formatting of LUTs, MHz, cells and tools. :mod:`bench.figures_fpga` makes the figures and
tables from them."""

from typing import NamedTuple

__all__ = [
    "BOARD_BUILDS", "BREAKDOWN", "BREAKDOWN_FILE", "BoardBuild", "ECP5_STRETCH", "ECP5_TARGETS",
    "Error", "MISSING", "NOT_BUILT", "PART_BUILDS", "ROUTER_TARGETS", "SOURCES",
    "block_unless_missing", "board_builds", "built", "cell", "cells_used", "fmaxes", "has",
    "int16", "lut_terms", "met", "mhz", "minutes", "n", "not_built_labels", "part_file",
    "part_report", "parts_built", "reaches", "seeds_text", "targets", "tools", "unless_missing",
]

class BoardBuild(NamedTuple):
    """A board build kept at some seeds: ``wse build --board BOARD --mesh MESH [--format
    bf16] --seed N --json`` for each seed, into ``fpga_<board>_<mesh>[_bf16]_seed<N>.json``."""
    board: str
    mesh: str
    seeds: tuple
    label: str
    fmt: str = "int16"

    def file(self, seed):
        return f"fpga_{self.board}_{self.mesh}{'_bf16' if self.fmt == 'bf16' else ''}_seed{seed}"

    def command(self, seed=None):
        fmt = " --format bf16" if self.fmt == "bf16" else ""
        seed = "" if seed is None else f" --seed {seed}"
        return f"wse build --board {self.board} --mesh {self.mesh}{fmt}{seed} --json"


#: The board builds kept.
BOARD_BUILDS = {
    "ulx3s_4x4": BoardBuild("ulx3s-85f", "4x4", (1, 2, 3),
                            "ULX3S-85F (ECP5), 4x4 mesh, the default"),
    "ulx3s_1x1": BoardBuild("ulx3s-85f", "1x1", (1,), "ULX3S-85F, 1x1 (CI's build)"),
    "ulx3s_1x1_bf16": BoardBuild("ulx3s-85f", "1x1", (1,), "ULX3S-85F, 1x1, bf16", "bf16"),
    "icebreaker_1x1": BoardBuild("icebreaker", "1x1", (1, 2, 3),
                                 "iCEBreaker (UP5K), 1x1, the default"),
}
#: The parts built alone: ``key: (part, device, seeds, label)``, one JSON ``fpga_<part>_<device>``
#: written by ``wse build --part P --device D --seeds ... --json``.
PART_BUILDS = {
    "router": ("router", "ecp5-85f", (1, 2, 3), "the router alone, ECP5-85F, out of context"),
}
#: The tile whose logic is broken down by module: ``(board, mesh)``, one JSON
#: ``fpga_breakdown_<board>_<mesh>`` written by ``python -m wse.fpga.breakdown B RxC --json``.
BREAKDOWN = ("ulx3s-85f", "4x4")

#: The ECP5's targets (a 4x4 on the ULX3S-85F): LUT4 places a PE at most, MHz at every seed at
#: least; and the stretch targets.
ECP5_TARGETS = {"luts_per_pe": 3000, "fmax_mhz": 50}
ECP5_STRETCH = {"luts_per_pe": 1500, "fmax_mhz": 100}
#: The router's targets, built alone for the ECP5: plain ``LUT4`` cells at most, MHz at the least
#: over the seeds at least.
ROUTER_TARGETS = {"lut4_cells": 2000, "fmax_mhz": 80}


def part_file(part, device):
    return f"fpga_{part}_{device}"


BREAKDOWN_FILE = f"fpga_breakdown_{BREAKDOWN[0]}_{BREAKDOWN[1]}"

SOURCES = {
    **{build.file(seed): f"{build.command(seed)} (make fpga-results)"
       for build in BOARD_BUILDS.values() for seed in build.seeds},
    **{part_file(part, device): f"wse build --part {part} --device {device} --seeds "
                                 f"{','.join(map(str, seeds))} --json (make fpga-results)"
       for part, device, seeds, _ in PART_BUILDS.values()},
    BREAKDOWN_FILE: f"python -m wse.fpga.breakdown {BREAKDOWN[0]} {BREAKDOWN[1]} --json "
                     f"(make fpga-results)",
}


class Error(ValueError):
    """Raised as :class:`bench.figures.RenderError` (set by it: no import cycle)."""


def has(r, name):
    """Whether the results ``r`` hold ``name``'s JSON (a build not run yet has none)."""
    try:
        r[name]
    except (KeyError, ValueError):
        return False
    return True


#: What a figure of a build not run yet says.
NOT_BUILT = "not built yet (`make fpga-results`)"
MISSING = object()


def unless_missing(files, figure):
    """``figure`` (``(value, format)``) that says :data:`NOT_BUILT` while one of ``files``
    (JSON names) is missing."""
    value, spec = figure

    def get(r):
        return value(r) if all(has(r, name) for name in files) else MISSING

    def show(v):
        if v is MISSING:
            return NOT_BUILT
        return spec(v) if callable(spec) else spec.format(v)
    return get, show


def block_unless_missing(files, block):
    """``block`` that says which JSON is missing while one of ``files`` is."""
    def build(r):
        missing = [name for name in files if not has(r, name)]
        if missing:
            return [f"*Not built yet: `make fpga-results` writes "
                    f"{', '.join(f'`{name}.json`' for name in missing)}.*"]
        return block(r)
    return build


def built(r, keys):
    """The keys of :data:`BOARD_BUILDS` whose first seed was built."""
    return [key for key in keys
            if has(r, BOARD_BUILDS[key].file(BOARD_BUILDS[key].seeds[0]))]


def board_builds(r, key):
    """The reports of ``key``'s seeds that were built, in seed order (the first seed must be; a
    later one not built yet is left out); they must share one netlist."""
    spec = BOARD_BUILDS[key]
    seeds = spec.seeds[:1] + tuple(seed for seed in spec.seeds[1:] if has(r, spec.file(seed)))
    builds = [r[spec.file(seed)] for seed in seeds]
    for seed, build in zip(seeds, builds):
        if ((build["board"], build["mesh"], build["seed"],
             build["config"]["fmt"]["name"] == "bf16") != (spec.board, spec.mesh, seed,
                                                            spec.fmt == "bf16")):
            raise Error(f"{spec.file(seed)}.json holds {build['board']} {build['mesh']} "
                         f"{build['config']['fmt']['name']} seed {build['seed']}")
        if build["cells"] != builds[0]["cells"]:
            raise Error(f"{key}: seed {seed} was built from another netlist than seed "
                         f"{spec.seeds[0]} (Yosys's cells differ): rerun `make fpga-results`")
    return builds


def parts_built(r):
    """The keys of :data:`PART_BUILDS` that were built."""
    return [key for key, (part, device, _, _) in PART_BUILDS.items()
            if has(r, part_file(part, device))]


def int16(keys):
    """The keys of :data:`BOARD_BUILDS` in int16 (bf16 has a table of its own)."""
    return [key for key in keys if BOARD_BUILDS[key].fmt != "bf16"]


def not_built_labels(r):
    """The labels of the builds whose (first) JSON is missing."""
    return ([BOARD_BUILDS[key].label for key in int16(BOARD_BUILDS)
             if key not in built(r, [key])]
            + [label for key, (_, _, _, label) in PART_BUILDS.items()
               if key not in parts_built(r)])


def part_report(r, key):
    part, device, _, _ = PART_BUILDS[key]
    return r[part_file(part, device)]


# -- formatting ---------------------------------------------------------------------------------

def n(value):
    """A count as the docs write it: 2489, 14 529."""
    return f"{value:,}".replace(",", " ") if value >= 10_000 else str(value)


def mhz(values):
    return " / ".join(f"{v:.2f}" for v in values)


def minutes(seconds):
    low, high = min(seconds), max(seconds)
    if high < 120:
        return f"{low:.0f}–{high:.0f} s" if round(low) != round(high) else f"{low:.0f} s"
    low, high = low / 60, high / 60
    return f"{low:.0f}–{high:.0f} min" if round(low) != round(high) else f"{low:.0f} min"


def cells_used(build):
    """nextpnr's logic cells used against the device's (``ICESTORM_LC`` / ``TRELLIS_COMB``)."""
    for name in ("TRELLIS_COMB", "ICESTORM_LC"):
        if name in build["utilisation"]:
            used = build["utilisation"][name]["used"]
            available = build["utilisation"][name]["available"]
            return f"{n(used)} / {n(available)} ({100 * used / available:.0f} %)"
    raise Error(f"{build['board']} {build['mesh']}: no logic cells in nextpnr's utilisation")


def lut_terms(build):
    """``luts`` as its cells: ``30 801 `LUT4` + 2 x 2341 `CCU2C` + ...`` (ECP5), or ``''``."""
    cells = build["cells"]
    terms = [(1, "LUT4"), (2, "CCU2C"), (4, "TRELLIS_DPR16X4")]
    if "LUT4" not in cells:
        return ""
    text = " + ".join(f"{'' if w == 1 else f'{w} x '}{n(cells[name])} `{name}`"
                      for w, name in terms if cells.get(name))
    if cells.get("PFUMX"):
        text += f" (and {n(cells['PFUMX'])} `PFUMX`)"
    return text


def fmaxes(r, key):
    return [b["fmax_mhz"] for b in board_builds(r, key)]


def met(r, key):
    builds = board_builds(r, key)
    return all(b["timing_met"] for b in builds)


def seeds_text(r, key):
    seeds = [b["seed"] for b in board_builds(r, key)]
    return f"seed {seeds[0]}" if len(seeds) == 1 else "seeds " + " / ".join(map(str, seeds))


def targets(targets):
    return (f"at most {n(targets['luts_per_pe'])} LUT4 places a PE and at least "
            f"{targets['fmax_mhz']} MHz at every seed")


def reaches(r, targets):
    builds = board_builds(r, "ulx3s_4x4")
    return (builds[0]["luts_per_pe"] <= targets["luts_per_pe"]
            and all(b["fmax_mhz"] >= targets["fmax_mhz"] and b["timing_met"] for b in builds))


def cell(name):
    """A cell's name as a reader finds it: its tile and block, without the mesh's prefix and
    the mapped cell's suffix (``tile_1_1.router.route_state.walk``)."""
    for prefix in ("bridge.mesh.mesh.", "bridge.mesh.", "bridge."):
        if name.startswith(prefix):
            name = name[len(prefix):]
            break
    for suffix in ("_TRELLIS_FF", "_SB_DFF", "_SB_LUT4", "_LUT4", "_TRELLIS_DPR16X4", "_DP16KD",
                   "_SB_RAM40", "_MULT18X18D", "_SB_MAC16", "_CCU2C", "$"):
        cut = name.find(suffix)
        if cut > 0:
            name = name[:cut]
    return f"`{name}`"


def tools(r):
    """The tools and the source every build was made with, as one phrase."""
    builds = [b for key in built(r, BOARD_BUILDS) for b in board_builds(r, key)]
    builds += [part_report(r, key) for key in parts_built(r)]
    versions = {(t["yosys"]["version"], t["nextpnr"]["version"], t["amaranth"]["version"],
                 t["amaranth-boards"]["version"]) for t in (b["tools"] for b in builds)}
    if len(versions) != 1:
        raise Error("the FPGA builds were made with different tools: rerun "
                     "`make fpga-results`")
    yosys, nextpnr, amaranth, boards = versions.pop()

    def named(tool):
        names = sorted({b["tools"][tool]["command"] for b in builds})
        return " and ".join(f"`{name}`" for name in names)

    commits = sorted({"outside git" if b["commit"] is None else
                      b["commit"][:7] + ("-dirty" if b["commit"].endswith("-dirty") else "")
                      for b in builds})
    return (f"Yosys {yosys} as {named('yosys')}, nextpnr {nextpnr} as {named('nextpnr')}, "
            f"Amaranth {amaranth} and amaranth-boards {boards}, from commit "
            f"{' and '.join(commits)}")
