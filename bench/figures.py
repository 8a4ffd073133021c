"""The figures README.md and docs/results.md show: for each, the JSON file in ``bench/results/``
it comes from (:data:`SOURCES`, with the command that writes it), how it is derived and how it
is formatted (:data:`FIGURES`), and the generated tables (:data:`BLOCKS`). :mod:`bench.render`
puts them in the documents.
"""

import re

from . import figures_fpga, figures_torch

__all__ = ["BLOCKS", "BLOCK_FIGURES", "FIGURES", "SOURCES", "RenderError", "format_figure"]

#: Every JSON file in ``bench/results/`` and the command that writes it (`make results`).
SOURCES = {
    "router": "wse bench router --json",
    "pe": "wse bench pe --json",
    "pe_bf16": "wse bench pe --format bf16 --json",
    "router_queues": "python -m wse.bench.router_queues --json",
    "gemm_sweep": "wse bench gemm --sweep",
    "gemm_bf16": "wse bench gemm --format bf16 --json",
    "gemm_256_s99": "wse bench gemm --out-features 256 --in-features 256 --sparsity 0.99 --json",
    "train": "wse train --out DIR (DIR/report.json)",
    "train_bf16": "wse train --format bf16 --json",
    "train_bf16_systems2": "wse train --format bf16 --systems 2 --json",
    "train_steps3": "wse train --steps 3 --json",
    "train_rtl": "wse train --backend verilator --steps 3 --check-golden --json",
    "train_steps3_bf16": "wse train --format bf16 --steps 3 --json",
    "train_rtl_bf16": "wse train --backend verilator --format bf16 --steps 3 --check-golden --json",
    "train_rtl_full": "wse train --backend verilator --json",
    "sim": "wse bench sim --mesh 2x2 --mesh 4x4 --mesh 8x8 --mesh 16x16 --json",
    "train_capacity": "wse train --hidden 512,512 --memory-bytes 1048576 --steps 2 --json",
    "train_sparse512": "wse train --hidden 512,512 --sparsity 0.9 --prune random --steps 30 "
                       "--json",
    "coverage": "make coverage",
    "router_fuzz": "wse bench router --reconfigure --fuzz 10000000 --json",
    # make fpga-results: the FPGA builds (bench/figures_fpga.py)
    **figures_fpga.SOURCES,
    # the PyTorch example (bench/figures_torch.py)
    **figures_torch.SOURCES,
}


class RenderError(ValueError):
    """A marker names no known figure, or its JSON source is missing or lacks the figure."""


# -- the figures --------------------------------------------------------------------------------

def _gemm_point(r, sparsity):
    for point in r["gemm_sweep"]:
        if point["sparsity"] == sparsity:
            return point
    raise RenderError(f"gemm_sweep.json has no point at sparsity {sparsity}")


def _model_error(r):
    """The cycle model's largest relative error over the sweep."""
    return max(abs(p["model_cycles"] - p["cycles"]) / p["cycles"] for p in r["gemm_sweep"])


def _late_steps(r, key):
    """Mean of ``key`` per step over the last quarter of the training run (pruning done)."""
    return _late_steps_of(r, lambda step: step[key])


def _late_pass(r, name):
    """A pass's cycles per step once pruned, against dense, and the ratio."""
    mesh = _late_steps_of(r, lambda step: step["cycles_by_pass"][name])
    dense = _late_steps_of(r, lambda step: step["dense_cycles_by_pass"][name])
    return f"{mesh:,.0f} against {dense:,.0f} dense ({dense / mesh:.2f}x)"


def _late_steps_of(r, value):
    """Mean of ``value(step)`` over the last quarter of the training run."""
    late = r["train"]["history"][len(r["train"]["history"]) * 3 // 4:]
    return sum(value(step) for step in late) / len(late)


def _late_range(r):
    history = r["train"]["history"]
    return f"{history[len(history) * 3 // 4]['step']}-{history[-1]['step']}"


def _sim_row(r, mesh):
    return next(row for row in r["sim"]["meshes"] if row["mesh"] == mesh)


def _kilo(value):
    return f"{value / 1e3:,.0f} k" if value >= 1e4 else f"{value:,.0f}"


def _mb(n):
    return f"{n / 1e6:.1f} MB"


def _g(value):
    """A sparsity or a ratio as the table writes it: 0.9, 0.25, 10, 6.7."""
    return f"{value:.3g}" if value < 10 else f"{value:.0f}"



def _rtl_run(rtl, golden):
    """The figures of a checked RTL training run ``rtl`` against the golden run ``golden`` of
    the same steps: results checked, mismatches, cycles measured and modelled, the digest."""
    def same_digest(r):
        same = r[rtl]["weights_digest"] == r[golden]["weights_digest"]
        return "the same digest as" if same else "a DIFFERENT digest from"

    return {f"{rtl}.golden_checks": (lambda r: r[rtl]["checked_results"], "{}"),
            f"{rtl}.mismatches": (lambda r: r[rtl]["mismatches"], "{}"),
            f"{rtl}.mesh_cycles": (lambda r: r[rtl]["mesh_cycles"], "{:,}"),
            f"{rtl}.model_cycles": (lambda r: r[golden]["mesh_cycles"], "{:,}"),
            f"{rtl}.digest": (same_digest, "{}")}
#: The cycle figures of ``wse bench pe`` that do not depend on the number format.
_PE_CYCLES = ("cycles_per_weight", "zero_weight_cycles", "cr_overhead_cycles",
              "psum_engine_cycles_per_output", "random_placement")

#: ``name: (function of the Results, format)``; the format is a ``str.format`` template or a
#: callable. Grouped by the command whose JSON they read.
FIGURES = {
    # wse bench router
    "router.simulator": (lambda r: r["router"]["simulator"].capitalize(), "{}"),
    "router.seed": (lambda r: r["router"]["seed"], "{}"),
    "router.throughput_per_port": (lambda r: r["router"]["throughput_per_port"], "{:g}"),
    "router.hop_latency_cycles": (lambda r: r["router"]["hop_latency_cycles"], "{}"),
    "router.fuzz_cycles": (lambda r: r["router"]["fuzz_cycles"], "{:,}"),
    "router.fuzz_wavelets": (lambda r: r["router"]["fuzz_wavelets"], "{:,}"),
    # wse bench pe
    "pe.simulator": (lambda r: r["pe"]["simulator"].capitalize(), "{}"),
    "pe.seed": (lambda r: r["pe"]["seed"], "{}"),
    "pe.lanes": (lambda r: r["pe"]["lanes"], "{}"),
    "pe.n_tok": (lambda r: r["pe"]["n_tok"], "{}"),
    "pe.weights_per_point": (lambda r: r["pe"]["weights_per_point"], "{}"),
    "pe.overhead_at_005": (lambda r: r["pe"]["fixed_overhead_cycles"]["0.05"], "{:g}"),
    "pe.random.cycles": (lambda r: r["pe"]["random_placement"]["cycles_per_weight"], "{:.2f}"),
    "pe.random.ideal": (lambda r: r["pe"]["random_placement"]["ideal_cycles_per_weight"],
                        "{:g}"),
    "pe.random.model": (lambda r: r["pe"]["random_placement"]["model_cycles_per_weight"],
                        "{:.2f}"),
    "pe.cr_overhead_cycles": (lambda r: r["pe"]["cr_overhead_cycles"], "{:g}"),
    "pe.psum_engine_cycles_per_output": (lambda r: r["pe"]["psum_engine_cycles_per_output"],
                                         "{:g}"),
    # python -m wse.bench.router_queues
    "router_queues.count": (lambda r: r["router_queues"]["count"], "{}"),
    "router_queues.simulator": (lambda r: r["router_queues"]["simulator"].capitalize(), "{}"),
    "router_queues.seed": (lambda r: r["router_queues"]["seed"], "{}"),
    # wse bench gemm --sweep
    "pe_bf16.same": (lambda r: all(r["pe_bf16"][k] == r["pe"][k] for k in _PE_CYCLES),
                     lambda same: "the same as int16's" if same else "**not** int16's"),
    "pe_bf16.zero_weight_cycles": (lambda r: r["pe_bf16"]["zero_weight_cycles"], "{:g}"),
    "pe_bf16.macs_skipped_weight": (lambda r: r["pe_bf16"]["macs_skipped_weight"], "{}"),
    "gemm.simulator": (lambda r: r["gemm_sweep"][0]["backend"].capitalize(), "{}"),
    "gemm.mesh": (lambda r: r["gemm_sweep"][0]["mesh"], "{}"),
    "gemm.shape": (lambda r: r["gemm_sweep"][0]["shape"], "{}"),
    "gemm.dense_cycles": (lambda r: r["gemm_sweep"][0]["dense_cycles"], "{}"),
    "gemm.s90.cycles": (lambda r: _gemm_point(r, .9)["cycles"], "{}"),
    "gemm.s90.speedup": (lambda r: _gemm_point(r, .9)["speedup_vs_dense"], "{:.1f}x"),
    "gemm.s90.speedup2": (lambda r: _gemm_point(r, .9)["speedup_vs_dense"], "{:.2f}"),
    "gemm.s90.ideal": (lambda r: _gemm_point(r, .9)["ideal_speedup"], "{:.0f}x"),
    "gemm.s90.utilisation": (lambda r: _gemm_point(r, .9)["utilisation"], "{:.2f}"),
    "gemm.s90.utilisation3": (lambda r: _gemm_point(r, .9)["utilisation"], "{:.3f}"),
    "gemm.s90.zeros_speedup": (lambda r: _gemm_point(r, .9)["dense_cycles"]
                               / _gemm_point(r, .9)["zeros_streamed_cycles"], "{:.1f}x"),
    "gemm.s90.limits": (lambda r: _gemm_point(r, .9)["limits"], "{}"),
    "gemm.s90.default_cycles": (lambda r: _gemm_point(r, .9)["default_model_cycles"], "{}"),
    "gemm.s90.default_utilisation": (lambda r: _gemm_point(r, .9)["ideal_cycles"]
                                     / _gemm_point(r, .9)["default_model_cycles"], "{:.2f}"),
    "gemm.s99.speedup": (lambda r: _gemm_point(r, .99)["speedup_vs_dense"], "{:.0f}x"),
    "gemm.s99.cycles": (lambda r: _gemm_point(r, .99)["cycles"], "{}"),
    "gemm_256_s99.cycles": (lambda r: r["gemm_256_s99"]["cycles"], "{:,}"),
    "gemm_256_s99.model_cycles": (lambda r: r["gemm_256_s99"]["model_cycles"], "{:,}"),
    "gemm_256_s99.dense_cycles": (lambda r: r["gemm_256_s99"]["dense_cycles"], "{:,}"),
    "gemm_256_s99.speedup": (lambda r: r["gemm_256_s99"]["speedup_vs_dense"], "{:.1f}x"),
    "gemm_256_s99.ideal_speedup": (lambda r: r["gemm_256_s99"]["ideal_speedup"], "{:.0f}x"),
    "gemm_256_s99.bit_exact": (lambda r: r["gemm_256_s99"]["bit_exact"],
                               lambda v: "yes" if v else "**NO**"),
    "gemm.model_error": (_model_error, "{:.1%}"),
    "gemm_bf16.cycles": (lambda r: r["gemm_bf16"]["cycles"], "{}"),
    "gemm_bf16.dense_cycles": (lambda r: r["gemm_bf16"]["dense_cycles"], "{}"),
    "gemm_bf16.speedup": (lambda r: r["gemm_bf16"]["speedup_vs_dense"], "{:.2f}"),
    "gemm_bf16.utilisation": (lambda r: r["gemm_bf16"]["utilisation"], "{:.2f}"),
    "gemm_bf16.bit_exact": (lambda r: r["gemm_bf16"]["bit_exact"], lambda v: "yes" if v else
                            "**NO**"),
    # wse train --out DIR (defaults)
    "train.steps": (lambda r: r["train"]["steps"], "{}"),
    "train.epochs": (lambda r: r["train"]["epochs"], "{:g}"),
    "train.test_accuracy": (lambda r: r["train"]["test_accuracy"], "{:.3f}"),
    "train.best_accuracy": (lambda r: max(e["test_accuracy"] for e in r["train"]["evaluations"]),
                            "{:.3f}"),
    "train.weight_sparsity": (lambda r: r["train"]["weight_sparsity"], "{:.3f}"),
    "train.weight_sparsity_pct": (lambda r: r["train"]["weight_sparsity"], "{:.1%}"),
    "train.seconds": (lambda r: r["train"]["seconds"], "{:.1f} s"),
    "train.seconds_round": (lambda r: r["train"]["seconds"], "{:.0f} s"),
    "train.cycles_source": (lambda r: r["train"]["cycles_source"], "{}"),
    "train.mesh_cycles": (lambda r: r["train"]["mesh_cycles"], "{:,}"),
    "train.dense_cycles": (lambda r: r["train"]["dense_cycles"], "{:,}"),
    "train.speedup": (lambda r: r["train"]["speedup_vs_dense"], "{:.2f}x"),
    "train.io_cycles": (lambda r: r["train"]["io_cycles"], "{:,}"),
    "train.ideal_speedup": (lambda r: r["train"]["ideal_speedup"], "{:.2f}x"),
    "train.speedup_share": (lambda r: r["train"]["speedup_vs_dense"]
                            / r["train"]["ideal_speedup"], "{:.0%}"),
    # wse train --hidden 512,512 --sparsity 0.9 --prune random --steps 30
    "train_sparse512.speedup": (lambda r: r["train_sparse512"]["speedup_vs_dense"], "{:.2f}x"),
    "train_sparse512.ideal_speedup": (lambda r: r["train_sparse512"]["ideal_speedup"],
                                      "{:.2f}x"),
    "train_sparse512.io_share": (lambda r: r["train_sparse512"]["io_cycles"]
                                 / r["train_sparse512"]["mesh_cycles"], "{:.0%}"),
    "train_sparse512.test_accuracy": (lambda r: r["train_sparse512"]["test_accuracy"],
                                      "{:.3f}"),
    "train.late_steps": (_late_range, "{}"),
    "train.late_mesh_cycles": (lambda r: _late_steps(r, "mesh_cycles"), "{:,.0f}"),
    "train.late_dense_cycles": (lambda r: _late_steps(r, "dense_cycles"), "{:,.0f}"),
    "train.late_speedup": (lambda r: _late_steps(r, "dense_cycles")
                           / _late_steps(r, "mesh_cycles"), "{:.1f}x"),
    **{f"train.late_{name}": (lambda r, name=name: _late_pass(r, name), "{}")
       for name in ("forward", "gradient", "delta")},
    "train.gradient_overflows": (lambda r: r["train"]["gradient_overflows"], "{}"),
    "train.bytes_per_link": (lambda r: r["train"]["swarmx"]["bytes_per_link"], _mb),
    "train.broadcast_bytes_per_link": (
        lambda r: r["train"]["swarmx"]["broadcast_bytes_per_link"], _mb),
    "train.reduce_bytes_per_link": (lambda r: r["train"]["swarmx"]["reduce_bytes_per_link"],
                                    _mb),
    # wse train --backend verilator --steps 3 --check-golden, against the golden run
    "train_rtl.mesh": (lambda r: r["train_rtl"]["mesh"], "{}"),
    "train_rtl.model_error": (lambda r: abs(r["train_steps3"]["mesh_cycles"]
                                            / r["train_rtl"]["mesh_cycles"] - 1), "{:.1%}"),
    "train_rtl.seconds": (lambda r: r["train_rtl"]["seconds"], "{:.0f} s"),
    **_rtl_run("train_rtl", "train_steps3"),
    **_rtl_run("train_rtl_bf16", "train_steps3_bf16"),
    "train_rtl_full.steps": (lambda r: r["train_rtl_full"]["steps"], "{}"),
    "train_rtl_full.seconds": (lambda r: r["train_rtl_full"]["seconds"], "{:.0f} s"),
    "train_rtl_full.seconds_per_step": (lambda r: r["train_rtl_full"]["seconds_per_step"] * 1e3,
                                        "{:.0f} ms"),
    "train_rtl_full.mesh_cycles": (lambda r: r["train_rtl_full"]["mesh_cycles"], "{:,}"),
    "train_rtl_full.test_accuracy": (lambda r: r["train_rtl_full"]["test_accuracy"], "{:.3f}"),
    "train_rtl_full.digest": (lambda r: "the same digest as" if r["train_rtl_full"][
        "weights_digest"] == r["train"]["weights_digest"] else "**A DIFFERENT DIGEST** from",
                              "{}"),
    "sim.speedup_4x4": (lambda r: _sim_row(r, "4x4")["speedup"], "{:.0f}x"),
    "sim.compiled_4x4": (lambda r: _sim_row(r, "4x4")["compiled_cycles_per_second"], _kilo),
    "sim.cocotb_4x4": (lambda r: _sim_row(r, "4x4")["cocotb_cycles_per_second"], _kilo),
    "sim.efficiency_4x4": (lambda r: _sim_row(r, "4x4")["harness_efficiency"], "{:.2f}"),
    "sim.verilator_4x4": (lambda r: _sim_row(r, "4x4")["verilator_cycles_per_second"], _kilo),
    "sim.lanes_vs_verilator_4x4": (lambda r: _sim_row(r, "4x4")["lanes_vs_verilator"],
                                   "{:.1f}x"),
    "sim.threads": (lambda r: "; ".join(f"{n} thread{'s' if n != '1' else ''}: {_kilo(v)}"
                                        for n, v in r["sim"]["threads"].items() if n != "mesh"),
                    "{}"),
    "sim.threads_mesh": (lambda r: r["sim"]["threads"]["mesh"], "{}"),
    # wse train --hidden 512,512 --memory-bytes 1048576
    "capacity.model": (lambda r: r["train_capacity"]["model"], "{}"),
    "capacity.weights": (lambda r: r["train_capacity"]["model_bytes_int16"] // 2, "{:,}"),
    "capacity.int16_kb": (lambda r: r["train_capacity"]["model_bytes_int16"] / 1e3, "{:.0f} kB"),
    "capacity.sram_bytes": (lambda r: r["train_capacity"]["mesh_sram_bytes"], "{:,}"),
    "capacity.memory_limit": (lambda r: r["train_capacity"]["memoryx"]["memory_limit"] / 2**20,
                              "{:g} MiB"),
    "capacity.state": (lambda r: r["train_capacity"]["memoryx"]["memory_bytes"]
                       + r["train_capacity"]["memoryx"]["disk_bytes"], _mb),
    "capacity.disk": (lambda r: r["train_capacity"]["memoryx"]["disk_bytes"], _mb),
    # make fpga-results (bench/figures_fpga.py)
    **figures_fpga.FIGURES,
    **figures_torch.FIGURES,
}


# -- the generated blocks -----------------------------------------------------------------------

def _table(header, rows, align=None):
    align = align or ["---"] * len(header)
    return [f"| {' | '.join(header)} |", f"|{'|'.join(align)}|",
            *(f"| {' | '.join(map(str, row))} |" for row in rows)]


def _router_queues_table(r):
    rows = [(c["n_queues"], c["depth"], f"{c['uniform_throughput_per_port']:.3f}",
             c["uniform_cycles"]) for c in r["router_queues"]["configs"]]
    return _table(("queues", "depth", "throughput per port", "cycles"), rows, ["---:"] * 4)


def _gemm_sweep_table(r):
    rows = []
    for p in r["gemm_sweep"]:
        bold = (lambda text: f"**{text}**") if p["sparsity"] == .9 else str
        rows.append((bold(_g(p["sparsity"])), p["nnz"], bold(p["cycles"]), p["model_cycles"],
                     p["default_model_cycles"], p["zeros_streamed_cycles"],
                     bold(f"{p['speedup_vs_dense']:.2f}"),
                     _g(p["ideal_speedup"]), bold(f"{p['utilisation']:.2f}"),
                     f"{p['psum_overhead_cycles_per_output']:.2f}", p["io_cycles"],
                     f"{p['speedup_with_io']:.2f}", "yes" if p["bit_exact"] else "**NO**"))
    return _table(("sparsity", "nonzeros", "cycles", "model", "default program (model)",
                   "zeros streamed",
                   "speedup vs dense", "ideal (useful MACs)", "utilisation",
                   "psum overhead / output", "load + read", "speedup with load + read",
                   "bit-exact"), rows)


def _sim_table(r):
    rows = [(m["mesh"], m["shape"], f"{m['cycles']:,}", m["engine"],
             _kilo(m["compiled_cycles_per_second"]),
             _kilo(m["verilator_cycles_per_second"]) if m["verilator_cycles_per_second"] else "–",
             f"{m['lanes_vs_verilator']:.1f}x" if m["lanes_vs_verilator"] else "–",
             _kilo(m["cocotb_cycles_per_second"]) if m["cocotb_cycles_per_second"] else "–",
             f"**{m['speedup']:.1f}x**" if m["speedup"] else "–",
             _kilo(m["free_running_cycles_per_second"]), f"{m['harness_efficiency']:.2f}",
             f"{m['pe_cycles_per_second'] / 1e6:.2f} M",
             f"{m['build_seconds']:.0f} s{' (hierarchical)' if m.get('hierarchical') else ''}")
            for m in r["sim"]["meshes"]]
    return _table(("mesh", "GEMM (out x in x tokens)", "cycles", "model", "compiled cycles/s",
                   "Verilator's model cycles/s", "lanes / Verilator", "cocotb cycles/s",
                   "speedup", "free-running cycles/s", "harness efficiency", "PE cycles/s",
                   "build"), rows, ["---", "---", "---:", "---", *["---:"] * 9])


#: The rows of the training table: a label and a template whose ``{NAME}`` are figures.
_TRAIN_ROWS = (
    ("test accuracy (held-out digits)",
     "**{train.test_accuracy}** (best epoch {train.best_accuracy})"),
    ("hidden-layer sparsity", "{train.weight_sparsity}"),
    ("training time", "**{train.seconds}**"),
    ("mesh cycles, all steps ({train.cycles_source})", "{train.mesh_cycles}"),
    ("&nbsp;&nbsp;of which edge transfers (activations in, results out)", "{train.io_cycles}"),
    ("dense-equivalent cycles", "{train.dense_cycles} ({train.speedup})"),
    ("ideal speedup (dense over sparse useful MACs)",
     "{train.ideal_speedup} ({train.speedup_share} of it reached)"),
    ("per step once pruned (steps {train.late_steps})",
     "{train.late_mesh_cycles} against {train.late_dense_cycles} dense ({train.late_speedup})"),
    ("&nbsp;&nbsp;forward pass", "{train.late_forward}"),
    ("&nbsp;&nbsp;weight-gradient pass", "{train.late_gradient}"),
    ("&nbsp;&nbsp;delta pass", "{train.late_delta}"),
    ("gradient passes that saturated", "{train.gradient_overflows}"),
    ("SwarmX bytes per link", "{train.bytes_per_link} ({train.broadcast_bytes_per_link} weight "
                              "streams down, {train.reduce_bytes_per_link} gradients up)"),
)
_FIELD = re.compile(r"\{([\w.]+)\}")

#: The figures that generated blocks use (beside the markers in the documents).
BLOCK_FIGURES = frozenset(name for row in _TRAIN_ROWS for cell in row
                          for name in _FIELD.findall(cell))


def _train_table(r):
    def fill(template):
        return _FIELD.sub(lambda m: format_figure(m[1], r), template)
    return _table(("figure", "value"), [(fill(label), fill(value)) for label, value in _TRAIN_ROWS])


def _train_passes_table(r):
    """Per pass of the two whole runs: sparse cycles (of them edge transfers), dense cycles,
    the speedup, and each pass's share of the sparse run."""
    rows = []
    for label, name in (("64-64-10, gradual pruning to 90 %", "train"),
                        ("64-512-512-10, 90 % random", "train_sparse512")):
        run = r[name]
        for p in ("forward", "delta", "gradient"):
            mesh, io = run["cycles_by_pass"][p], run["io_cycles_by_pass"][p]
            dense = run["dense_cycles_by_pass"][p]
            rows.append((label if p == "forward" else "", p, f"{mesh:,}", f"{io:,}",
                         f"{dense:,}", f"{dense / mesh:.2f}x", f"{mesh / run['mesh_cycles']:.0%}"))
        rows.append(("", "**whole run**", f"**{run['mesh_cycles']:,}**",
                     f"{run['io_cycles']:,}", f"{run['dense_cycles']:,}",
                     f"**{run['speedup_vs_dense']:.2f}x** (ideal {run['ideal_speedup']:.2f}x)",
                     "100%"))
    return _table(("run", "pass", "sparse cycles", "of them edge transfers", "dense cycles",
                   "speedup", "share of the run"), rows,
                  ["---", "---", "---:", "---:", "---:", "---:", "---:"])


def _train_formats_table(r):
    rows = []
    for label, name in (("int16, 1 system", "train"), ("bf16, 1 system", "train_bf16"),
                        ("bf16, 2 systems", "train_bf16_systems2")):
        run = r[name]
        passes = run["speedup_by_pass"]
        rows.append((label, f"**{run['test_accuracy']:.3f}**", f"`{run['weights_digest'][:12]}`",
                     f"{run['mesh_cycles']:,}",
                     ", ".join(f"{passes[p]:.2f}x" for p in ("forward", "delta", "gradient")),
                     f"{run['mesh_overflows']}, {run['gradient_overflows']}",
                     _mb(run["swarmx"]["reduce_bytes_per_link"]), f"{run['seconds']:.1f} s"))
    return _table(("run", "test accuracy", "weights digest", "mesh cycles",
                   "speedup vs dense: forward, delta, gradient", "overflows (mesh, gradient)",
                   "gradients up a link", "wall time"), rows)


#: ``name: function of the Results returning the block's lines``; ``json:FILE`` is built in.
BLOCKS = {
    "router_queues.table": _router_queues_table,
    "gemm_sweep.table": _gemm_sweep_table,
    "train.table": _train_table,
    "train_formats.table": _train_formats_table,
    "train_passes.table": _train_passes_table,
    "sim.table": _sim_table,
    **figures_fpga.BLOCKS,
    **figures_torch.BLOCKS,
}


def format_figure(name, results):
    """The text of figure ``name``, from ``results``."""
    try:
        value, spec = FIGURES[name]
    except KeyError:
        raise RenderError(f"no figure named {name!r} (bench/figures.py: FIGURES)") from None
    try:
        value = value(results)
    except RenderError:
        raise
    except (KeyError, IndexError, TypeError) as error:
        raise RenderError(f"figure {name!r}: its JSON lacks {error!r}") from None
    except ValueError as error:     # figures_fpga: seeds that disagree
        raise RenderError(f"figure {name!r}: {error}") from None
    return spec(value) if callable(spec) else spec.format(value)
