"""The mesh as lanes: every tile of a mesh one lane of the same vector instructions.

A mesh repeats one tile module (``fabric.mesh.TILE_MODULE``; only its straps differ), so its
tiles can be simulated together: :func:`generate` turns the tile's word-level netlist (Yosys on
the exported Verilog: :mod:`sim.lanes_netlist`) into C++ (:mod:`sim.lanes_cpp`) in which
every signal is a vector of :data:`LANES` values, one per tile, and every cell one vector
operation for all of them (GCC vector extensions: on AVX-512, sixteen 32-bit lanes an
instruction). The mesh's wiring (a tile's outputs to its neighbours' inputs, the edge ports,
the flags) is generated from :mod:`fabric.mesh` beside it, and the model has the members of
the Verilated ``wse_harness`` that ``sim/harness/mesh_harness.cpp`` drives, so the same stream
drivers run it (``docs/sim.md``, "The lanes model").

Evaluation: the tile's combinational cells in dependency order, in *phases* separated by the
exchanges between tiles (a tile input that comes from a neighbour's output is copied across
lanes once every lane has computed that output: a neighbour's ``ready`` depends on what this
tile offers); then, at a rising clock, every register and memory takes its next value. The
model assumes what the harness does: after a rising edge nothing is read before the inputs are
set and the model evaluated again, so a rising edge only commits.
"""

import hashlib
import os
import subprocess
import time
from functools import cache
from pathlib import Path

from wse.fabric.mesh import TILE_MODULE, edge_ports, tile_verilog
from wse.rtl.tile import strap_values
from wse.rtl.wavelet import COLOR_BITS, DATA_BITS, MAX_COLORS, Direction

from . import cocotb_run, toolchain
from .compiled import HARNESS, Harness, ports_header
from .lanes_cpp import LANES, PRELUDE, PRELUDE_PATH, Writer, lane_get, lane_set
from .lanes_netlist import Tile, exchange_source, ordered, schedule, tile_netlist
from .lanes_netlist import mask as _mask
from .lanes_netlist import value_type as _type
from .lanes_netlist import vector_type as _vtype

__all__ = ["LANES", "generate", "build_lanes_harness"]

#: The wavelet's fields in a packed word, as ``rtl.wavelet`` lays them out: data, color, ctrl.
CTRL_AT = DATA_BITS + COLOR_BITS

_STEPS = {Direction.N: (-1, 0), Direction.E: (0, 1), Direction.S: (1, 0), Direction.W: (0, -1)}


def generate(config, module):
    """C++ header of the lanes model of ``config``'s mesh from the tile's Yosys JSON
    ``module``; also the input and output edge port names in ``edge_ports`` order."""
    tile = Tile(module)
    exchanges = schedule(tile)
    writer = Writer(tile)
    rows, cols = config.rows, config.cols
    n_tiles = rows * cols
    groups = -(-n_tiles // LANES)
    ports = edge_ports(config)
    inputs = [name for name, way, _, _ in ports if way == "in"]
    outputs = [name for name, way, _, _ in ports if way == "out"]
    edge = {(tile_rc, d, way): name for name, way, tile_rc, d in ports}
    lines = [PRELUDE, f"constexpr int GROUPS = {groups};", f"constexpr int TILES = {n_tiles};",
             "", "struct LaneMesh {"]
    # the harness's members
    lines += ["  CData clk = 0, rst_in = 0, error = 0, overflow = 0, idle = 0;"]
    for name in inputs:
        lines.append(f"  IData {name}_tdata = 0; CData {name}_tdest = 0, {name}_tuser = 0, "
                     f"{name}_tvalid = 0, {name}_tready = 0;")
    for name in outputs:
        lines.append(f"  IData {name}_tdata = 0; CData {name}_tdest = 0, {name}_tuser = 0, "
                     f"{name}_tvalid = 0;")
    lines += ["  CData rst = 0, last_clk = 0;"]
    # the lanes' registers, twice: this cycle's and the next's (a rising edge swaps them)
    lines.append("  struct State {")
    for sig in tile.signals.values():
        if sig.kind == "state":
            lines.append(f"    {_type(sig.width)} {sig.name}[GROUPS];")
    lines += ["  } st[2];", "  int cur = 0;"]
    for sig in tile.signals.values():
        if sig.kind in ("input", "strap", "rst") or (sig.kind == "comb" and sig.stored):
            lines.append(f"  {_type(sig.width)} {sig.name}[GROUPS];")
    for mem, (width, size, _, offset) in tile.memories.items():
        if offset:
            raise ValueError(f"the lanes model has no memory with an offset ({mem})")
        element = "uint32_t" if width <= 32 else "uint64_t"
        lines.append(f"  {element} {mem}[GROUPS][{size}][{LANES}];")
    writes = [n for n in tile.nodes if n.kind == "write"]
    for node in writes:
        t = _vtype(node.width)
        lines.append(f"  W wa_{node.name}[GROUPS]; {t} wd_{node.name}[GROUPS], "
                     f"we_{node.name}[GROUPS];")

    # construction: power-up values, straps
    lines += ["", "  explicit LaneMesh(VerilatedContext *) {",
              "    std::memset(static_cast<void *>(this), 0, sizeof *this);"]
    for sig in tile.signals.values():
        if sig.kind == "state" and getattr(sig, "init", 0):
            t = _type(sig.width)
            init = "ALL" if t == "M" else f"({t}){{}} + {sig.init}{'u' if t == 'W' else 'ull'}"
            lines.append(f"    for (int g = 0; g < GROUPS; ++g) st[0].{sig.name}[g] = {init};")
    for mem, (_, _, words, _) in tile.memories.items():
        for a, word in enumerate(words):
            if word:
                lines.append(f"    for (int g = 0; g < GROUPS; ++g) for (int l = 0; l < "
                             f"{LANES}; ++l) {mem}[g][{a}][l] = {word}u;")
    plan = config.plan
    for r in range(rows):
        for c in range(cols):
            lane = r * cols + c
            straps = strap_values(config.core(r, c), plan.routes(r, c), plan.cfg_route(r, c))
            for name, value in straps.items():
                for k, sig in enumerate(tile.inputs[name]):
                    limb = (value >> (64 * k)) & _mask(sig.width)
                    lines.append("    " + lane_set(_type(sig.width), f"{sig.name}[{lane // LANES}]",
                                                   lane % LANES, f"{limb}ull"))
    lines.append("  }")

    # the exchanges: where each tile input comes from, lane by lane
    def sources(g, port, d):
        """Where each lane of group ``g`` takes tile input ``port`` from: ``(lane, "tile",
        neighbour's lane)``, ``(lane, "edge", port name)`` or ``(lane, "outlet", None)`` (the
        harness's wrapper: outlets always ready); lanes fed by nothing are left out (0)."""
        dr, dc = _STEPS[d]
        for k in range(min(LANES, n_tiles - g * LANES)):
            r, c = divmod(g * LANES + k, cols)
            if 0 <= r + dr < rows and 0 <= c + dc < cols:
                yield k, "tile", (r + dr) * cols + c + dc
            elif port.startswith("i_") and ((r, c), d, "in") in edge:
                yield k, "edge", edge[(r, c), d, "in"]
            elif port.startswith("o_") and ((r, c), d, "out") in edge:
                yield k, "outlet", None

    def exchange(sig_name):
        """A tile input's value in every lane: its neighbours' output, or an edge's."""
        port = sig_name[3:]
        d, source = exchange_source(port)
        t = _type(tile.signals[sig_name].width)
        out = []
        for g in range(groups):
            if t == "M":       # one bit: shifted masks of each source group, and edge bits
                shifted, edges, terms = {}, [], []
                for k, kind, at in sources(g, port, d):
                    if kind == "tile":
                        key = (at // LANES, k - at % LANES)
                        shifted[key] = shifted.get(key, 0) | 1 << k
                    else:
                        edges.append(f"(M({at}_tvalid & 1) << {k})" if kind == "edge"
                                     else f"{1 << k:#x}u")
                for (source_group, shift), bits in sorted(shifted.items()):
                    value = f"out_{source}[{source_group}]"
                    if shift:
                        value = f"({value} {'<<' if shift > 0 else '>>'} {abs(shift)})"
                    terms.append(f"({value} & {bits:#x}u)")
                terms += edges
                out.append(f"    {sig_name}[{g}] = {' | '.join(terms) or '0u'};")
                continue
            # words: each source group's lanes permuted into place, then the edge's words
            moved, expr = {}, f"(({t}){{}})"
            for k, kind, at in sources(g, port, d):
                if kind == "tile":
                    index, lanes = moved.setdefault(at // LANES, ([0] * LANES, [0]))
                    index[k] = at % LANES
                    lanes[0] |= 1 << k
            for source_group, (index, (lanes,)) in sorted(moved.items()):
                expr = (f"SEL_{t}({lanes:#x}u, {expr}, PERM_{t}(out_{source}[{source_group}], "
                        f"(W){{{', '.join(map(str, index))}}}))")
            for k, kind, at in sources(g, port, d):
                if kind == "edge":           # only the payload is a word
                    value = (f"(uint64_t({at}_tdata) | uint64_t({at}_tdest & {MAX_COLORS - 1}) "
                             f"<< {DATA_BITS} | uint64_t({at}_tuser & 1) << {CTRL_AT})")
                elif kind == "outlet":
                    value = "1"
                else:
                    continue
                expr = f"SEL_{t}({1 << k:#x}u, {expr}, ({t}){{}} + {value})"
            out.append(f"    {sig_name}[{g}] = {expr};")
        return out

    phases = max(n.phase for n in tile.nodes) + 1
    lines += ["", "  void settle() {", "    State &s = st[cur], &n = st[cur ^ 1];",
              "    for (int g = 0; g < GROUPS; ++g) " + "; ".join(
                  f"{sig.name}[g] = rst ? ALL : 0u" for sig in tile.inputs["rst"]) + ";"]
    for phase in range(phases):
        members = [n for n in tile.nodes if n.phase == phase]
        for sig_name in exchanges:
            if tile.signals[sig_name].phase == phase:
                lines += exchange(sig_name)
        lines.append("    for (int g = 0; g < GROUPS; ++g) {")
        lines += [f"      {writer.node(n)}" for n in ordered(members)]
        lines.append("    }")
    # what the harness reads
    flags = {"idle": ("&", "1"), "error": ("|", "0"), "overflow": ("|", "0")}
    for flag, (op, start) in flags.items():
        parts = {"error": ["out_error", "out_core_error"]}.get(flag, [f"out_{flag}"])
        terms = " | ".join(lane_get(_type(tile.signals[p].width), f"{p}[l / {LANES}]",
                                    f"(l % {LANES})") for p in parts)
        lines.append(f"    {{ CData v = {start}; for (int l = 0; l < TILES; ++l) v = v {op} "
                     f"CData(({terms}) & 1); {flag} = v; }}")

    def at(member, lane):
        return lane_get(_type(tile.signals[f"out_{member}"].width), f"out_{member}"
                        f"[{lane // LANES}]", lane % LANES)

    for name, way, (r, c), d in ports:
        lane = r * cols + c
        side = d.name.lower()
        if way == "in":
            lines.append(f"    {name}_tready = CData({at(f'i_{side}__ready', lane)});")
        else:
            lines += [f"    {{ uint64_t w = {at(f'o_{side}__payload', lane)}; "
                      f"{name}_tdata = IData(w); {name}_tdest = CData((w >> {DATA_BITS}) & "
                      f"{MAX_COLORS - 1}); {name}_tuser = CData((w >> {CTRL_AT}) & 1); "
                      f"{name}_tvalid = CData({at(f'o_{side}__valid', lane)}); }}"]
    lines.append("  }")

    # a rising edge: every register and memory takes its next value
    lines += ["", "  void commit() {", "    rst = rst_in;", "    cur ^= 1;",
              "    for (int g = 0; g < GROUPS; ++g) {"]
    for node in writes:
        lines.append(f"      write_words(&{node.memory}[g][0][0], wa_{node.name}[g], "
                     f"{tile.memories[node.memory][1]}, wd_{node.name}[g], we_{node.name}[g]);")
    lines += ["    }", "  }", "",
              "  void eval() {",
              "    if (clk && !last_clk) commit(); else settle();",
              "    last_clk = clk;", "  }",
              "  void final() {}", "};", ""]
    return "\n".join(lines), tuple(inputs), tuple(outputs)


#: Stand-in for the few parts of Verilator's runtime ``mesh_harness.cpp`` uses.
SHIM = """\
// Written by sim/lanes.py: the parts of verilated.h the stream drivers use.
#pragma once
#include <cstdint>
typedef uint8_t CData;
typedef uint32_t IData;
struct VerilatedContext {
    uint64_t now = 0;
    void timeInc(uint64_t step) { now += step; }
    uint64_t time() const { return now; }
};
"""

#: The C++ compiler's options: the machine's own vector instructions (the build is per machine).
CXXFLAGS = ["-std=c++17", "-O2", "-march=native"]


@cache
def _tool_versions(yosys):
    """What the build depends on beyond its sources: the Yosys and the C++ compiler."""
    versions = []
    for command in ([yosys, "-V"], ["g++", "-dumpfullversion"]):
        try:
            done = subprocess.run(command, capture_output=True, text=True)
        except FileNotFoundError:
            raise RuntimeError(f"the lanes model needs {command[0]}, which is not on PATH "
                               f"(engine='verilator' runs without it)") from None
        versions.append(done.stdout.strip())
    return versions


def build_lanes_harness(config, *, root=None):
    """The :class:`~sim.compiled.Harness` of ``config``'s mesh as a lanes model, built unless
    an identical build exists (``build/sim/compiled/lanes-<hash>/``: the hash covers the tile's
    Verilog, the mesh's layout, straps and edge ports, the generator's and the harness's
    sources, the tools' versions and the compiler's options). A failed build, or a tile the
    model cannot run, raises ``RuntimeError`` naming the cause (and the build's log)."""
    toolchain.setup()
    yosys = os.environ.get("YOSYS", "yosys")
    verilog = tile_verilog(config)
    here = Path(__file__).parent
    source = "".join((here / name).read_text() for name in
                     ("lanes.py", "lanes_cpp.py", "lanes_netlist.py")) + HARNESS.read_text() \
        + PRELUDE_PATH.read_text()
    layout = repr((config.rows, config.cols, edge_ports(config),
                   [(config.core(r, c), config.plan.routes(r, c), config.plan.cfg_route(r, c))
                    for r, c in config.tiles]))
    digest = hashlib.sha256("\n".join([verilog, source, layout, *_tool_versions(yosys),
                                       *CXXFLAGS]).encode())
    top = f"lanes_{config.rows}x{config.cols}"
    root = Path(root or cocotb_run.BUILD_ROOT)
    directory = (root / "compiled" / f"{top}-{digest.hexdigest()[:12]}").resolve()
    executable = directory / "mesh_harness"
    with cocotb_run.locked(directory):
        stamp = directory / "build_seconds"
        build_seconds = cocotb_run.cached_seconds(executable, stamp)
        if build_seconds is None:           # (make would take an empty executable as built)
            stamp.unlink(missing_ok=True)
            executable.unlink(missing_ok=True)
            started = time.monotonic()
            module = tile_netlist(verilog, TILE_MODULE, yosys, directory)
            try:
                model, inputs, outputs = generate(config, module)
            except (ValueError, KeyError) as error:
                raise RuntimeError(f"the lanes model cannot run this tile: {error} "
                                   f"(engine='verilator' can)") from None
            (directory / "lanes_model.h").write_text(model)
            (directory / "ports.h").write_text(ports_header(
                inputs, outputs, include="lanes_model.h", top_class="LaneMesh",
                writer="sim/lanes.py"))
            (directory / "verilated.h").write_text(SHIM)
            (directory / HARNESS.name).write_text(HARNESS.read_text())
            log = directory / "build.log"
            command = ["g++", *CXXFLAGS, f"-I{directory}", HARNESS.name, "-o", executable.name]
            with open(log, "w") as out:
                done = subprocess.run(command, cwd=directory, stdout=out,
                                      stderr=subprocess.STDOUT)
            if done.returncode != 0:
                tail = "\n".join(log.read_text().splitlines()[-5:])
                raise RuntimeError(f"building the lanes model of {top} failed (log: {log}):\n"
                                   f"{tail}")
            build_seconds = round(time.monotonic() - started, 3)
            stamp.write_text(f"{build_seconds:.3f}\n")
    ports = edge_ports(config)
    return Harness(executable=executable, directory=directory, top=top, waves=False,
                   threads=1, hierarchical=False, build_seconds=build_seconds,
                   inputs=tuple(n for n, w, _, _ in ports if w == "in"),
                   outputs=tuple(n for n, w, _, _ in ports if w == "out"), engine="lanes")

