"""The mesh as a compiled Verilator model: one executable that runs whole exchanges in C++.

:func:`build_harness` exports a mesh (:class:`fabric.mesh.AxiStreamMesh`) as Verilog, writes
``ports.h`` (its edge ports, in :func:`fabric.mesh.edge_ports` order) and builds it with
``sim/harness/mesh_harness.cpp`` (the stream drivers and the exchange loop) into one
executable, which :class:`runtime.compiled.CompiledSystem` runs and feeds through pipes. Each
distinct design (its Verilog text and build options) gets one directory under
``build/sim/compiled``, built once and reused by every later process, guarded by a file lock
like the cocotb builds (``docs/sim.md``).
"""

import hashlib
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from wse.fabric.mesh import AxiStreamMesh, edge_ports

from . import toolchain
from .cocotb_run import BUILD_ROOT, build_directory, cached_seconds, locked
from .export import export_verilog

__all__ = ["HARNESS", "VERILATOR_ARGS", "CXXFLAGS", "MAKEFLAGS", "Harness", "build_harness",
           "harness_top", "ports_header"]

#: The C++ side: stream drivers, the exchange loop, the pipe protocol.
HARNESS = Path(__file__).with_name("harness") / "mesh_harness.cpp"

#: Verilator's options for a compiled model (the mesh's; the router's, :mod:`sim.router_compiled`).
VERILATOR_ARGS = ["-Wno-fatal", "-Wno-WIDTHEXPAND", "-Wno-WIDTHTRUNC", "-Wno-UNOPTFLAT",
                  "--x-assign", "fast", "--x-initial", "fast", "-O3"]
#: The C++ compiler's options for a compiled model.
CXXFLAGS = ["-std=c++17"]
#: ``make`` variables of the C++ build: the code run every cycle (Verilator's "fast" files, the
#: harness, its runtime) at -O2, the code run once (constructors, the initial settle: the
#: "slow" files) unoptimised: a third less compiler time for the same model speed (-O3, -Os,
#: -march=native and clang gave the model nothing, gcc's profile-guided optimisation 5 % at most
#: for a second compile and a training run: ``docs/sim.md``).
MAKEFLAGS = ["OPT_FAST=-O2", "OPT_SLOW=-O0", "OPT_GLOBAL=-O2"]
#: Verilator configurations. ``flat``: the tile stays one C++ class instead of being inlined at
#: every position (a 4x4 was 26 MB of C++ and three to five minutes to compile, now about one),
#: though Verilator still writes each position's logic out on its own, so the build grows with
#: the mesh. ``hierarchical``: the tile is a hierarchical block, verilated and compiled once
#: whatever the mesh's size (seconds), but about four times slower to run (every tile a
#: model of its own, evaluated through its ports).
_VLT = {
    False: "`verilator_config\nno_inline -module \"wse_tile\"\n",
    True: "`verilator_config\nhier_block -module \"wse_tile\"\n",
}
#: Meshes of more tiles than this build hierarchically unless told otherwise.
HIERARCHICAL_ABOVE = 64


@dataclass(frozen=True)
class Harness:
    """A built harness: its executable and what it was built with."""
    executable: Path
    directory: Path
    top: str
    waves: bool
    threads: int
    hierarchical: bool
    build_seconds: float
    inputs: tuple
    outputs: tuple
    engine: str = "verilator"      # or "lanes" (sim/lanes.py)


def harness_top(config, top):
    """Verilog of module ``wse_harness`` around mesh module ``top``, and ``ports.h`` binding
    its ports for the C++ drivers; also the input and output port names, in
    :func:`fabric.mesh.edge_ports` order.

    The wrapper registers the reset (``rst_in`` a cycle early) and ties every outlet's
    ``tready`` high (the drivers never hold an outlet back): what depends on them is then
    evaluated once a clock edge instead of at every input change, which is most of the model's
    work otherwise (Verilator re-evaluates all logic combinational from a top input whenever
    the inputs may have changed, and the mesh's synchronous reset reaches almost every
    register's next-state logic)."""
    ports = edge_ports(config)
    inputs = [name for name, way, _, _ in ports if way == "in"]
    outputs = [name for name, way, _, _ in ports if way == "out"]
    fields = {"tdata": 32, "tdest": 5, "tuser": 1, "tvalid": 1}
    decls = ["  input clk,", "  input rst_in,"]
    for name in inputs:
        decls += [f"  input [{w - 1}:0] {name}_{f}," for f, w in fields.items()]
        decls.append(f"  output {name}_tready,")
    for name in outputs:
        decls += [f"  output [{w - 1}:0] {name}_{f}," for f, w in fields.items()]
    decls += ["  output error,", "  output overflow,", "  output idle"]
    conns = [".clk(clk)", ".rst(rst)", ".error(error)", ".overflow(overflow)", ".idle(idle)"]
    conns += [f".{name}_{f}({name}_{f})" for name in inputs for f in (*fields, "tready")]
    conns += [f".{name}_{f}({name}_{f})" for name in outputs for f in fields]
    conns += [f".{name}_tready(1'b1)" for name in outputs]
    verilog = "\n".join([
        "// Written by sim/compiled.py around one mesh for the compiled backend: do not edit.",
        "module wse_harness(", *decls, ");",
        "  reg rst = 1'b0;",
        "  always @(posedge clk) rst <= rst_in;",
        f"  {top} mesh(", ",\n".join(f"    {c}" for c in conns), "  );",
        "endmodule", ""])

    header = ports_header(inputs, outputs, include="Vwse_harness.h", top_class="Vwse_harness",
                          writer="sim/compiled.py")
    return verilog, header, tuple(inputs), tuple(outputs)


def ports_header(inputs, outputs, *, include, top_class, writer):
    """``ports.h``: the model class ``top_class`` (declared in ``include``) and ``bind_ports``,
    which points the C++ drivers of ``mesh_harness.cpp`` at each edge port's members."""
    def binds(names, array, members):
        return [f"    {array}[{k}].{f} = &top->{name}_{f};"
                for k, name in enumerate(names) for f in members]

    def quoted(values):
        return ", ".join(f'"{v}"' for v in values)

    return "\n".join([
        f"// Written by {writer} for one mesh: do not edit.",
        "#pragma once",
        f'#include "{include}"',
        f"#define TOP_CLASS {top_class}",
        f"constexpr int N_IN = {len(inputs)};",
        f"constexpr int N_OUT = {len(outputs)};",
        f"static const char *const IN_NAMES[] = {{{quoted(inputs)}}};",
        f"static const char *const OUT_NAMES[] = {{{quoted(outputs)}}};",
        "template <class In, class Out>",
        f"void bind_ports({top_class} *top, In &in, Out &out) {{",
        *binds(inputs, "in", ("tdata", "tdest", "tuser", "tvalid", "tready")),
        *binds(outputs, "out", ("tdata", "tdest", "tuser", "tvalid")),
        "}", ""])


def build_harness(config, *, waves=False, threads=1, hierarchical=None, root=None, jobs=None):
    """The :class:`Harness` of ``config``'s mesh, built unless an identical build exists.

    ``waves``: built with FST tracing (``--waves`` then records one). ``threads``: Verilator's
    ``--threads`` (1: single-threaded). ``hierarchical``: the tile verilated once as a
    hierarchical block (fast to build, slower to run); by default for meshes of more than
    :data:`HIERARCHICAL_ABOVE` tiles. A failed build raises ``RuntimeError`` naming its log.
    """
    if type(threads) is not int or threads < 1:
        raise ValueError(f"threads must be a positive integer, not {threads!r}")
    if hierarchical is None:
        hierarchical = config.rows * config.cols > HIERARCHICAL_ABOVE
    hierarchical = bool(hierarchical)
    vlt = _VLT[hierarchical]
    toolchain.setup()
    top = f"wse_mesh_{config.rows}x{config.cols}"
    root = Path(root or BUILD_ROOT)
    staging = build_directory(root / "verilog") / f"{top}-compiled-{os.getpid()}.v"
    export_verilog(AxiStreamMesh(config), staging, name=top)
    text = staging.read_text()
    staging.unlink()
    wrapper, header, inputs, outputs = harness_top(config, top)
    text += "\n" + wrapper
    args = [*VERILATOR_ARGS, *(["--trace-fst"] if waves else [])]
    if threads > 1:
        args += ["--threads", str(threads)]
    if hierarchical:
        args.append("--hierarchical")
    cxxflags = [*CXXFLAGS, *(["-DWSE_WAVES"] if waves else [])]
    source = HARNESS.read_text()
    digest = hashlib.sha256("\n".join([text, header, source, vlt, *args, *cxxflags,
                                       *MAKEFLAGS]).encode())
    directory = (root / "compiled" / f"{top}-{digest.hexdigest()[:12]}").resolve()
    executable = directory / "obj_dir" / "mesh_harness"
    with locked(directory):
        stamp = directory / "build_seconds"
        build_seconds = cached_seconds(executable, stamp)
        if build_seconds is None:           # (make would take an empty executable as built)
            stamp.unlink(missing_ok=True)
            executable.unlink(missing_ok=True)
            build_seconds = round(_verilate(directory, top, text, header, vlt, source, args,
                                            cxxflags, jobs), 3)
            stamp.write_text(f"{build_seconds:.3f}\n")
    return Harness(executable=executable, directory=directory, top=top, waves=waves,
                   threads=threads, hierarchical=hierarchical, build_seconds=build_seconds,
                   inputs=inputs,
                   outputs=outputs)


def _verilate(directory, top, text, header, vlt, source, args, cxxflags, jobs):
    """Verilate and compile into ``directory``; the wall-clock seconds it took."""
    started = time.monotonic()
    (directory / f"{top}.v").write_text(text)
    (directory / "ports.h").write_text(header)
    (directory / "harness.vlt").write_text(vlt)
    harness = directory / HARNESS.name
    harness.write_text(source)
    jobs = jobs or os.cpu_count() or 1
    command = ["verilator", "--cc", "--exe", "--build", "-j", str(jobs), *args,
               "--top-module", "wse_harness", "-o", "mesh_harness",
               "-CFLAGS", " ".join([*cxxflags, f"-I{directory}"]),
               *(flag for variable in MAKEFLAGS for flag in ("-MAKEFLAGS", variable)),
               "harness.vlt", f"{top}.v", harness.name]
    log = directory / "build.log"
    with open(log, "w") as out:
        done = subprocess.run(command, cwd=directory, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        tail = "\n".join(log.read_text().splitlines()[-5:])
        raise RuntimeError(f"building the compiled {top} failed (log: {log}):\n{tail}")
    return time.monotonic() - started
