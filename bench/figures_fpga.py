"""The FPGA figures README.md and docs show, from the ``wse build --json`` reports that
``make fpga-results`` keeps in ``bench/results/fpga_*.json``: which file holds each build
(:data:`SOURCES`), the figures (:data:`FIGURES`) and the tables (:data:`BLOCKS`).
:mod:`bench.figures` adds them to its own; :mod:`bench.render` puts them in the documents.

A board build is one JSON per seed (``fpga_<board>_<RxC>[_bf16]_seed<N>``); the seeds of a
board and mesh must come from one netlist (Yosys's cells the same), or rendering fails. A part
built alone is one JSON for all its seeds (``fpga_<part>_<device>``); the tile's breakdown by
module one more (``fpga_breakdown_<board>_<RxC>``).
"""

from typing import NamedTuple

__all__ = ["BLOCKS", "BOARD_BUILDS", "BREAKDOWN", "ECP5_STRETCH", "ECP5_TARGETS", "FIGURES",
           "PART_BUILDS", "ROUTER_TARGETS", "SOURCES", "BoardBuild", "board_builds"]


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


def _part_file(part, device):
    return f"fpga_{part}_{device}"


_BREAKDOWN_FILE = f"fpga_breakdown_{BREAKDOWN[0]}_{BREAKDOWN[1]}"

SOURCES = {
    **{build.file(seed): f"{build.command(seed)} (make fpga-results)"
       for build in BOARD_BUILDS.values() for seed in build.seeds},
    **{_part_file(part, device): f"wse build --part {part} --device {device} --seeds "
                                 f"{','.join(map(str, seeds))} --json (make fpga-results)"
       for part, device, seeds, _ in PART_BUILDS.values()},
    _BREAKDOWN_FILE: f"python -m wse.fpga.breakdown {BREAKDOWN[0]} {BREAKDOWN[1]} --json "
                     f"(make fpga-results)",
}


class _Error(ValueError):
    """Raised as :class:`bench.figures.RenderError` (set by it: no import cycle)."""


def _has(r, name):
    """Whether the results ``r`` hold ``name``'s JSON (a build not run yet has none)."""
    try:
        r[name]
    except (KeyError, ValueError):
        return False
    return True


#: What a figure of a build not run yet says.
NOT_BUILT = "not built yet (`make fpga-results`)"
_MISSING = object()


def _unless_missing(files, figure):
    """``figure`` (``(value, format)``) that says :data:`NOT_BUILT` while one of ``files``
    (JSON names) is missing."""
    value, spec = figure

    def get(r):
        return value(r) if all(_has(r, name) for name in files) else _MISSING

    def show(v):
        if v is _MISSING:
            return NOT_BUILT
        return spec(v) if callable(spec) else spec.format(v)
    return get, show


def _block_unless_missing(files, block):
    """``block`` that says which JSON is missing while one of ``files`` is."""
    def build(r):
        missing = [name for name in files if not _has(r, name)]
        if missing:
            return [f"*Not built yet: `make fpga-results` writes "
                    f"{', '.join(f'`{name}.json`' for name in missing)}.*"]
        return block(r)
    return build


def _built(r, keys):
    """The keys of :data:`BOARD_BUILDS` whose first seed was built."""
    return [key for key in keys
            if _has(r, BOARD_BUILDS[key].file(BOARD_BUILDS[key].seeds[0]))]


def board_builds(r, key):
    """The reports of ``key``'s seeds that were built, in seed order (the first seed must be; a
    later one not built yet is left out); they must share one netlist."""
    spec = BOARD_BUILDS[key]
    seeds = spec.seeds[:1] + tuple(seed for seed in spec.seeds[1:] if _has(r, spec.file(seed)))
    builds = [r[spec.file(seed)] for seed in seeds]
    for seed, build in zip(seeds, builds):
        if ((build["board"], build["mesh"], build["seed"],
             build["config"]["fmt"]["name"] == "bf16") != (spec.board, spec.mesh, seed,
                                                            spec.fmt == "bf16")):
            raise _Error(f"{spec.file(seed)}.json holds {build['board']} {build['mesh']} "
                         f"{build['config']['fmt']['name']} seed {build['seed']}")
        if build["cells"] != builds[0]["cells"]:
            raise _Error(f"{key}: seed {seed} was built from another netlist than seed "
                         f"{spec.seeds[0]} (Yosys's cells differ): rerun `make fpga-results`")
    return builds


def _parts_built(r):
    """The keys of :data:`PART_BUILDS` that were built."""
    return [key for key, (part, device, _, _) in PART_BUILDS.items()
            if _has(r, _part_file(part, device))]


def _not_built_labels(r):
    """The labels of the builds whose (first) JSON is missing."""
    return ([BOARD_BUILDS[key].label for key in _int16(BOARD_BUILDS)
             if key not in _built(r, [key])]
            + [label for key, (_, _, _, label) in PART_BUILDS.items()
               if key not in _parts_built(r)])


def _part(r, key):
    part, device, _, _ = PART_BUILDS[key]
    return r[_part_file(part, device)]


# -- formatting ---------------------------------------------------------------------------------

def _n(value):
    """A count as the docs write it: 2489, 14 529."""
    return f"{value:,}".replace(",", " ") if value >= 10_000 else str(value)


def _mhz(values):
    return " / ".join(f"{v:.2f}" for v in values)


def _minutes(seconds):
    low, high = min(seconds), max(seconds)
    if high < 120:
        return f"{low:.0f}–{high:.0f} s" if round(low) != round(high) else f"{low:.0f} s"
    low, high = low / 60, high / 60
    return f"{low:.0f}–{high:.0f} min" if round(low) != round(high) else f"{low:.0f} min"


def _cells_used(build):
    """nextpnr's logic cells used against the device's (``ICESTORM_LC`` / ``TRELLIS_COMB``)."""
    for name in ("TRELLIS_COMB", "ICESTORM_LC"):
        if name in build["utilisation"]:
            used = build["utilisation"][name]["used"]
            available = build["utilisation"][name]["available"]
            return f"{_n(used)} / {_n(available)} ({100 * used / available:.0f} %)"
    raise _Error(f"{build['board']} {build['mesh']}: no logic cells in nextpnr's utilisation")


def _lut_terms(build):
    """``luts`` as its cells: ``30 801 `LUT4` + 2 x 2341 `CCU2C` + ...`` (ECP5), or ``''``."""
    cells = build["cells"]
    terms = [(1, "LUT4"), (2, "CCU2C"), (4, "TRELLIS_DPR16X4")]
    if "LUT4" not in cells:
        return ""
    text = " + ".join(f"{'' if w == 1 else f'{w} x '}{_n(cells[name])} `{name}`"
                      for w, name in terms if cells.get(name))
    if cells.get("PFUMX"):
        text += f" (and {_n(cells['PFUMX'])} `PFUMX`)"
    return text


def _fmaxes(r, key):
    return [b["fmax_mhz"] for b in board_builds(r, key)]


def _met(r, key):
    builds = board_builds(r, key)
    return all(b["timing_met"] for b in builds)


def _seeds_text(r, key):
    seeds = [b["seed"] for b in board_builds(r, key)]
    return f"seed {seeds[0]}" if len(seeds) == 1 else "seeds " + " / ".join(map(str, seeds))


def _targets(targets):
    return (f"at most {_n(targets['luts_per_pe'])} LUT4 places a PE and at least "
            f"{targets['fmax_mhz']} MHz at every seed")


def _reaches(r, targets):
    builds = board_builds(r, "ulx3s_4x4")
    return (builds[0]["luts_per_pe"] <= targets["luts_per_pe"]
            and all(b["fmax_mhz"] >= targets["fmax_mhz"] and b["timing_met"] for b in builds))


def _cell(name):
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


def _tools(r):
    """The tools and the source every build was made with, as one phrase."""
    builds = [b for key in _built(r, BOARD_BUILDS) for b in board_builds(r, key)]
    builds += [_part(r, key) for key in _parts_built(r)]
    versions = {(t["yosys"]["version"], t["nextpnr"]["version"], t["amaranth"]["version"],
                 t["amaranth-boards"]["version"]) for t in (b["tools"] for b in builds)}
    if len(versions) != 1:
        raise _Error("the FPGA builds were made with different tools: rerun "
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


# -- the figures --------------------------------------------------------------------------------

_ROUTER_FILES = [_part_file(*PART_BUILDS["router"][:2])]
_BF16_FILES = [BOARD_BUILDS["ulx3s_1x1_bf16"].file(1)]
_BREAKDOWN_FILES = [_BREAKDOWN_FILE]

FIGURES = {
    "fpga.ulx3s_4x4.luts_per_pe": (lambda r: board_builds(r, "ulx3s_4x4")[0]["luts_per_pe"],
                                   "{:g}"),
    "fpga.ulx3s_4x4.fmax_min": (lambda r: min(_fmaxes(r, "ulx3s_4x4")), "{:.2f}"),
    "fpga.ecp5_targets": (lambda r: ECP5_TARGETS, _targets),
    "fpga.ecp5_targets_met": (lambda r: _reaches(r, ECP5_TARGETS),
                              lambda v: "are met" if v else "are **not** met"),
    "fpga.ecp5_stretch": (lambda r: ECP5_STRETCH, _targets),
    "fpga.ecp5_stretch_met": (lambda r: _reaches(r, ECP5_STRETCH),
                              lambda v: "are met" if v else "are not"),
    "fpga.tools": (_tools, "{}"),
    **{name: _unless_missing(_ROUTER_FILES, figure) for name, figure in {
        "fpga.router.lut4_cells": (lambda r: _part(r, "router")["lut4_cells"], _n),
        "fpga.router.luts": (lambda r: _part(r, "router")["luts"], _n),
        "fpga.router.ccu2c": (lambda r: (_part(r, "router")["luts"]
                                         - _part(r, "router")["lut4_cells"]) // 2, _n),
        "fpga.router.lutram": (lambda r: _part(r, "router")["lutram"], _n),
        "fpga.router.ffs": (lambda r: _part(r, "router")["ffs"], _n),
        "fpga.router.fmax_range": (lambda r: (_part(r, "router")["fmax_mhz_min"],
                                              _part(r, "router")["fmax_mhz_max"]),
                                   lambda v: f"{v[0]:.2f}–{v[1]:.2f}"),
        "fpga.router.targets_met": (
            lambda r: (_part(r, "router")["lut4_cells"] <= ROUTER_TARGETS["lut4_cells"]
                       and _part(r, "router")["fmax_mhz_min"] >= ROUTER_TARGETS["fmax_mhz"]),
            lambda v: "meets them" if v else "does **not** meet them"),
    }.items()},
}


# -- the generated blocks -----------------------------------------------------------------------

def _table(header, rows):
    return [f"| {' | '.join(header)} |", f"|{'|'.join(['---'] * len(header))}|",
            *(f"| {' | '.join(map(str, row))} |" for row in rows)]


def _int16(keys):
    """The keys of :data:`BOARD_BUILDS` in int16 (bf16 has a table of its own)."""
    return [key for key in keys if BOARD_BUILDS[key].fmt != "bf16"]


def _summary_table(r):
    """README: each build's resources and clock."""
    rows = []
    for key in _int16(_built(r, BOARD_BUILDS)):
        spec = BOARD_BUILDS[key]
        label = spec.label
        b = board_builds(r, key)[0]
        fmax = _fmaxes(r, key)
        rows.append((label, _n(b["luts"]), _n(b["ffs"]), b["brams"], b["dsps"],
                     f"{_mhz(fmax)} MHz, {_seeds_text(r, key)} ({b['target_mhz']:g} MHz clock: "
                     f"{'met' if _met(r, key) else '**NOT met**'})", f"{b['luts_per_pe']:g}"))
    for key in _parts_built(r):
        label = PART_BUILDS[key][3]
        p = _part(r, key)
        rows.append((label, f"{_n(p['luts'])} ({_n(p['lut4_cells'])} `LUT4`; {p['lutram']} "
                            f"LUT-RAM cells)", _n(p["ffs"]), "–", "–",
                     f"{_mhz(p['fmax_mhz'])} MHz, seeds {' / '.join(map(str, p['seeds']))}", "–"))
    rows += [(label, NOT_BUILT, "", "", "", "", "") for label in _not_built_labels(r)]
    return _table(("build", "LUTs", "FFs", "BRAMs", "DSPs", "fmax", "LUTs per PE"), rows)


def _builds_table(r):
    """docs/fpga.md: each build's command and every figure of its report."""
    rows = []
    for key in _int16(_built(r, BOARD_BUILDS)):
        spec = BOARD_BUILDS[key]
        builds = board_builds(r, key)
        b = builds[0]
        terms = _lut_terms(b)
        rows.append((f"`{spec.command()}`",
                     f"**{_n(b['luts'])} ({b['luts_per_pe']:g})**"
                     + (f": {terms}" if terms else ""),
                     _n(b["ffs"]), b["brams"], b["dsps"], _cells_used(b),
                     f"**{_mhz(_fmaxes(r, key))}** ({_seeds_text(r, key)})",
                     f"{b['target_mhz']:g}", "yes" if _met(r, key) else "**no**",
                     _minutes([x["seconds"] for x in builds])))
    for key in _parts_built(r):
        part, device, _, _ = PART_BUILDS[key]
        p = _part(r, key)
        ccu = (p["luts"] - p["lut4_cells"]) // 2
        rows.append((f"`wse build --part {part} --device {device} --json`",
                     f"{_n(p['luts'])}: {_n(p['lut4_cells'])} `LUT4` + 2 x {ccu} `CCU2C`; "
                     f"{p['lutram']} LUT-RAM cells", _n(p["ffs"]), p["brams"] or "–",
                     p["dsps"] or "–", "out of context",
                     f"**{_mhz(p['fmax_mhz'])}** (seeds {' / '.join(map(str, p['seeds']))})",
                     "100", "yes" if all(f >= 100 for f in p["fmax_mhz"]) else "no",
                     _minutes([p["seconds"]]) + " (all seeds)"))
    rows += [(label, NOT_BUILT, "", "", "", "", "", "", "", "") for label in _not_built_labels(r)]
    return _table(("command", "LUTs (a PE)", "FFs", "BRAMs", "DSPs", "cells used / device",
                   "fmax MHz", "target", "met", "build time"), rows)


def _critical_paths_table(r):
    """docs/fpga.md: where each board build's clock is limited, per seed."""
    rows = []
    for key in _built(r, BOARD_BUILDS):
        spec = BOARD_BUILDS[key]
        for b in board_builds(r, key):
            path = b["critical_path"]
            if path is None:
                continue
            name = f"{spec.board} {spec.mesh}" + (" bf16" if spec.fmt == "bf16" else "")
            rows.append((name, b["seed"], _cell(path["from"]), _cell(path["to"]),
                         f"{path['delay_ns']:.2f}",
                         f"{path['routing_ns']:.2f} ({path['routing_ns'] / path['delay_ns']:.0%})"))
    return _table(("build", "seed", "from", "to", "ns", "of it wires"), rows)


def _bf16_table(r):
    """docs/fpga.md: the ULX3S 1x1 in int16 and in bf16."""
    rows = []
    for key in ("ulx3s_1x1", "ulx3s_1x1_bf16"):
        b = board_builds(r, key)[0]
        rows.append((BOARD_BUILDS[key].fmt, f"`{BOARD_BUILDS[key].command(b['seed'])}`",
                     _n(b["luts"]), _n(b["ffs"]), b["dsps"], f"**{b['fmax_mhz']:.2f}**",
                     f"{b['target_mhz']:g}", "yes" if b["timing_met"] else "**no**"))
    int16, bf16 = _bf16_pair(r)
    return [*_table(("format", "command", "LUTs", "FFs", "DSPs", "fmax MHz", "target", "met"),
                    rows), "",
            f"bf16 takes {_n(bf16['luts'] - int16['luts'])} LUT4 places more than int16 and runs "
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
    modules = r[_BREAKDOWN_FILE]["modules"]
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
            raise _Error(f"the breakdown's module {module!r} is in no row of BREAKDOWN_ROWS "
                         f"(bench/figures_fpga.py)")
    return sums


def _breakdown_table(r):
    """docs/fpga.md: where the tile's logic goes, and how much of it is the router's."""
    rows = _breakdown_rows(r)
    luts, lutram = _breakdown_total(r, "luts"), _breakdown_total(r, "lutram")
    router = sum(t["luts"] for label, t in rows if label.startswith("router"))
    return [f"{_n(luts)} LUT4 places in all, {_n(4 * lutram)} of them in {_n(lutram)} LUT-RAM "
            f"cells; the router {_n(router)} ({router / luts:.0%}):", "",
            *_table(("module", "LUT4 places / LUT-RAM cells / FFs"),
                    [(label, f"{t['luts']} / {t['lutram']} / {t['ffs']}") for label, t in rows])]


def _breakdown_total(r, key):
    return sum(f[key] for f in r[_BREAKDOWN_FILE]["modules"].values())


def _sources_rows(r):
    """docs/results.md: the rows of its table of files for the FPGA builds' JSON."""
    return [f"| `{name}.json` | `{command.removesuffix(' (make fpga-results)')}` |"
            for name, command in SOURCES.items()]


BLOCKS = {
    "fpga.bf16": _block_unless_missing(_BF16_FILES, _bf16_table),
    "fpga.breakdown": _block_unless_missing(_BREAKDOWN_FILES, _breakdown_table),
    "fpga.sources": _sources_rows,
    "fpga.summary": _summary_table,
    "fpga.builds": _builds_table,
    "fpga.critical_paths": _critical_paths_table,
}
