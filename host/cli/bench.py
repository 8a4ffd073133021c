"""``wse bench``: measure the router, the PE and the GEMM in RTL, and print the figures (a table,
or JSON); ``wse bench gemm --sweep`` also writes a plot."""

import json
from pathlib import Path

import click
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .options import (
    FORMAT_OPTION,
    MESH_OPTION,
    MODEL_BACKENDS,
    SIMULATORS,
    Number,
    console,
    make_directory,
)

__all__ = ["bench"]


@click.group()
def bench():
    """Measure, and print the figures (a table, or one JSON object with --json)."""


@bench.command("router")
@click.option("--sim", "simulator", type=SIMULATORS, default="verilator", show_default=True)
@click.option("--fuzz", type=click.IntRange(min=1), default=100_000, show_default=True,
              help="Wavelets in the random-traffic fuzz.")
@click.option("--reconfigure", is_flag=True,
              help="Only the fuzz, with routes rewritten, switched and torn down while traffic "
                   "flows, on the router's compiled Verilator harness (minutes for 10 million "
                   "wavelets); fails unless nothing is lost, reordered or unexpected and the "
                   "drops counted are the drops expected.")
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def bench_router(simulator, fuzz, reconfigure, seed, as_json):
    """Router throughput with all outputs saturated, hop latency, and a long fuzz, in RTL."""
    if reconfigure:
        _reconfiguring_fuzz(simulator, fuzz, seed, as_json)
        return
    from wse.bench.router import bench_router as measure

    with console.status(f"router bench on {simulator}: throughput, latency, "
                        f"{fuzz} fuzz wavelets"):
        try:
            figures = measure(sim=simulator, fuzz=fuzz, seed=seed)
        except RuntimeError as error:
            raise click.ClickException(str(error)) from error
    _print_figures(figures, f"router on {simulator}", as_json)


def _reconfiguring_fuzz(simulator, fuzz, seed, as_json):
    from wse.bench.router import fuzz_failures
    from wse.bench.router_fuzz import fuzz_router

    if simulator != "verilator":
        raise click.BadParameter("the reconfiguring fuzz runs on Verilator's compiled harness, "
                                 f"not {simulator}", param_hint="'--sim'")
    with console.status(f"router fuzz with reconfiguration: {fuzz} wavelets") as status:
        def progress(done, totals):
            status.update(f"router fuzz with reconfiguration: {done}/{fuzz} wavelets, "
                          f"{totals['lost']} lost, {totals['reordered']} reordered, "
                          f"{totals['unexpected']} unexpected")
        try:
            figures = fuzz_router(fuzz, seed=seed, progress=progress)
        except RuntimeError as error:
            raise click.ClickException(str(error)) from error
    _print_figures(figures, "router fuzz with reconfiguration (compiled Verilator)", as_json)
    failures = fuzz_failures(figures)
    if failures:
        raise click.ClickException(f"router fuzz failed: {failures}")


@bench.command("pe")
@click.option("--sim", "simulator", type=SIMULATORS, default="verilator", show_default=True)
@click.option("--lanes", type=click.IntRange(min=1), default=4, show_default=True,
              help="Tokens per cycle (a power of two dividing --tokens).")
@click.option("--tokens", type=click.IntRange(min=1), default=32, show_default=True,
              help="Local tokens per core (a power of two).")
@click.option("--weights", type=click.IntRange(min=2), default=400, show_default=True,
              help="Weights streamed per measurement point.")
@FORMAT_OPTION
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def bench_pe(simulator, lanes, tokens, weights, fmt, seed, as_json):
    """Cycles per weight against activation density, zero-weight and CR cost, in RTL."""
    from wse.bench.pe import bench_pe as measure
    from wse.rtl.core_params import CoreParams

    try:
        CoreParams(n_feat=16, n_tok=tokens, n_out=8, lanes=lanes, fmt=fmt)
    except ValueError as error:
        raise click.BadParameter(str(error)) from error
    with console.status(f"PE bench on {simulator}: {lanes} lanes, {tokens} tokens, "
                        f"{fmt.name}"):
        try:
            figures = measure(sim=simulator, lanes=lanes, tokens=tokens, weights=weights,
                              seed=seed, fmt=fmt)
        except RuntimeError as error:
            raise click.ClickException(str(error)) from error
    _print_figures(figures, f"PE on {simulator}", as_json)


@bench.command("gemm")
@MESH_OPTION
@click.option("--sparsity", type=Number(0, 1, max_open=True), default=0.9,
              show_default=True, help="Fraction of W0's weights pruned (by magnitude).")
@click.option("--out-features", type=click.IntRange(min=1), default=64, show_default=True)
@click.option("--in-features", type=click.IntRange(min=1), default=64, show_default=True)
@click.option("--tokens", type=click.IntRange(min=1), default=32, show_default=True)
@click.option("--act-sparsity", type=Number(0, 1), default=0.0, show_default=True,
              help="Fraction of zero activations in X.")
@click.option("--backend", type=MODEL_BACKENDS, default="verilator", show_default=True)
@FORMAT_OPTION
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout (nothing else).")
@click.option("--sweep", is_flag=True,
              help="Sparsities 0 to 0.99 instead of --sparsity; writes DIR/gemm_sweep.png "
                   "and DIR/gemm_sweep.json.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("bench/results"), show_default=True, metavar="DIR",
              help="Where --sweep writes its plot and figures (created before the sweep).")
def bench_gemm(mesh, sparsity, out_features, in_features, tokens, act_sparsity, backend, fmt,
               seed, as_json, sweep, out_dir):
    """A magnitude-pruned GEMM against its dense original: cycles, speedup, utilisation, what
    limits it; every result checked bit for bit against the reference."""
    from wse.bench import gemm as gemm_bench
    from wse.fabric.config import gemm_config

    shape = {"out_features": out_features, "in_features": in_features, "tokens": tokens}
    sparsities = gemm_bench.SWEEP_SPARSITIES if sweep else (sparsity,)
    try:
        gemm_config(mesh, out_features, in_features, tokens, fmt=fmt)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--mesh / the shape") from error
    if sweep:
        make_directory(out_dir, "--out")
    with console.status(f"GEMM bench on {backend}") as status:
        try:
            points = gemm_bench.sweep_gemm(sparsities, mesh=mesh, act_sparsity=act_sparsity,
                                           backend=backend, seed=seed, fmt=fmt,
                                           progress=status.update, **shape)
        except (RuntimeError, ValueError) as error:   # SimulationError is a RuntimeError
            raise click.ClickException(str(error)) from error
    if not sweep:
        _print_figures(points[0], f"sparse GEMM on {backend}", as_json)
        return
    gemm_bench.plot_sweep(points, out_dir / "gemm_sweep.png")
    (out_dir / "gemm_sweep.json").write_text(json.dumps(points, indent=2) + "\n")
    console.print(f"wrote {out_dir / 'gemm_sweep.png'} and {out_dir / 'gemm_sweep.json'}",
                  markup=False, highlight=False)
    if as_json:
        click.echo(json.dumps(points))
        return
    _print_sweep(points)


@bench.command("sim")
@click.option("--mesh", "meshes", multiple=True, metavar="RxC",
              help="A mesh to measure (repeat the option; default 4x4, 8x8 and 16x16).")
@click.option("--sparsity", type=Number(0, 1, max_open=True), default=0.5, show_default=True,
              help="Fraction of the GEMM's weights pruned.")
@click.option("--cocotb-max-tiles", type=click.IntRange(min=0), default=16, show_default=True,
              help="Run the cocotb path too on meshes of at most this many tiles.")
@click.option("--verilator-max-tiles", type=click.IntRange(min=0), default=64,
              show_default=True,
              help="Run Verilator's model too on meshes of at most this many tiles.")
@click.option("--threads", "threads", type=click.IntRange(min=1), multiple=True,
              default=(2,), show_default=True,
              help="Verilator --threads to measure on the largest mesh, besides one thread "
                   "(repeatable; 1 alone: one thread only).")
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout (nothing else).")
def bench_sim(meshes, sparsity, cocotb_max_tiles, verilator_max_tiles, threads, seed, as_json):
    """RTL simulation speed: a GEMM per mesh on the compiled backend (the lanes model), on
    Verilator's model and under cocotb: cycles per second, speedups and the free-running limit
    (results and cycles cross-checked)."""
    from wse.bench.sim import DEFAULT_MESHES
    from wse.bench.sim import bench_sim as measure
    from wse.fabric.config import parse_mesh

    try:
        meshes = [parse_mesh(m) for m in (meshes or DEFAULT_MESHES)]
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--mesh") from error
    with console.status("simulation bench") as status:
        try:
            figures = measure(meshes, sparsity=sparsity, seed=seed, threads=threads,
                              cocotb_max_tiles=cocotb_max_tiles,
                              verilator_max_tiles=verilator_max_tiles, progress=status.update)
        except (RuntimeError, ValueError) as error:   # SimulationError is a RuntimeError
            raise click.ClickException(str(error)) from error
    if as_json:
        click.echo(json.dumps(figures))
        return
    table = Table(title="RTL simulation speed (compute phase of one GEMM per mesh)",
                  box=box.SIMPLE_HEAD, collapse_padding=True, pad_edge=False)
    columns = {"mesh": "mesh", "shape": "GEMM", "cycles": "cycles",
               "compiled_cycles_per_second": "compiled c/s",
               "engine": "model", "lanes_cycles_per_second": "lanes c/s",
               "verilator_cycles_per_second": "Verilator c/s",
               "lanes_vs_verilator": "lanes/Verilator",
               "cocotb_cycles_per_second": "cocotb c/s", "speedup": "speedup",
               "free_running_cycles_per_second": "free-running c/s",
               "harness_efficiency": "efficiency", "pe_cycles_per_second": "PE c/s",
               "build_seconds": "build s"}
    for title in columns.values():
        table.add_column(title, justify="right")
    for row in figures["meshes"]:
        table.add_row(*(Text(row[k]) if isinstance(row[k], str) else _cell(row[k], digits=2)
                        for k in columns))
    Console().print(table)
    t = figures["threads"]
    console.print(f"{t['mesh']}, Verilator's model: " + ", ".join(
                      f"--threads {k}: {v:,.0f} cycles/s"
                                             for k, v in t.items() if k != "mesh"),
                  markup=False, highlight=False)


def _print_sweep(points):
    first = points[0]
    table = Table(title=f"sparse GEMM sweep: {first['shape']} (out x in x tokens) on a "
                        f"{first['mesh']} mesh, {first['backend']}", box=box.SIMPLE_HEAD,
                  collapse_padding=True, pad_edge=False)
    columns = {"sparsity": "s", "nnz": "nnz", "cycles": "cycles", "model_cycles": "model",
               "dense_cycles": "dense",
               "zeros_streamed_cycles": "zeros sent", "speedup_vs_dense": "speedup",
               "ideal_speedup": "ideal", "utilisation": "util",
               "psum_overhead_cycles_per_output": "psum/out", "bit_exact": "exact"}
    for title in columns.values():
        table.add_column(title, justify="right", min_width=max(map(len, title.split())))
    for point in points:
        table.add_row(*(_cell(point[key], digits=2) for key in columns))
    Console().print(table)


def _cell(value, digits=3):
    if value is None:
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _print_figures(figures, title, as_json):
    if as_json:
        click.echo(json.dumps(figures))
        return
    table = Table(title=title)
    table.add_column("figure")
    table.add_column("value", justify="right")
    for name, value in figures.items():
        if isinstance(value, dict):
            value = "  ".join(f"{k}: {v:.3f}" if isinstance(v, float) else f"{k}: {v}"
                              for k, v in value.items())
        elif isinstance(value, str):
            value = Text(value, justify="left")     # words read from the left, numbers right
        else:
            value = _cell(value)
        table.add_row(name, value)
    Console().print(table)
