"""``wse``: the one command line of wse-mini.

Subcommands grow with the project: ``wse gemm`` runs ``Y = W @ X`` on a mesh, ``wse sim`` runs
cocotb testbenches, ``wse bench`` measures, ``wse export`` writes Verilog, ``wse train`` trains a
network by weight streaming (:mod:`host.cli.train`), ``wse build`` makes a bitstream
(:mod:`host.cli.build`).
"""

import json
import sys
from pathlib import Path

import click
import numpy as np
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .build import build
from .options import mesh_shape as _mesh_shape
from .train import train

__all__ = ["main"]

SIMULATORS = click.Choice(["verilator", "icarus"])
BACKENDS = click.Choice(["golden", "verilator", "icarus"])    # the simulating runtime.system.BACKENDS

console = Console(stderr=True)


@click.group()
@click.version_option(package_name="wse-mini")
def main():
    """wse-mini: a wafer-scale engine in miniature (Amaranth RTL, cocotb, numpy)."""


MESH_OPTION = click.option("--mesh", default="4x4", show_default=True, metavar="RxC",
                           callback=_mesh_shape, help="Rows x columns of tiles.")


# -- wse train (host/cli/train.py) ------------------------------------------------------------

main.add_command(train)
main.add_command(build)     # wse build: bitstreams (host/cli/build.py)


# -- wse gemm -----------------------------------------------------------------------------------

@main.command()
@click.argument("w_path", metavar="W.npy", type=click.Path(exists=True, dir_okay=False,
                                                           path_type=Path))
@click.argument("x_path", metavar="X.npy", type=click.Path(exists=True, dir_okay=False,
                                                           path_type=Path))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Where to save Y (.npy).")
@MESH_OPTION
@click.option("--backend", type=click.Choice([*BACKENDS.choices, "board"]), default="golden",
              show_default=True, help="What runs the mesh: a model, a simulator, or a board.")
@click.option("--raw", is_flag=True,
              help="Save the int32 totals instead of Y requantised to int16.")
@click.option("--no-balance", is_flag=True,
              help="Input features to rows by index (i % rows), not balanced by nonzeros.")
@click.option("--board", "board_name", type=click.Choice(["icebreaker", "ulx3s-85f"]),
              default=None, help="--backend board: the board, whose bitstream fixes the cores "
                                 "(its default mesh unless --mesh is given).")
@click.option("--port", default=None, metavar="PORT",
              help="--backend board: the serial device or pyserial URL (socket://host:port).")
@click.option("--baud", type=click.IntRange(min=1), default=None,
              help="--backend board: the bridge's baud rate [default: the board's].")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=5.0,
              show_default=True, help="--backend board: seconds to wait for the bridge.")
@click.pass_context
def gemm(ctx, w_path, x_path, output, mesh, backend, raw, no_balance, board_name, port, baud,
         timeout):
    """Y = W @ X on the mesh: W (out x in) and X (in x tokens) integer arrays in the int16
    range. Saves Y, prints the compute-phase cycles and the counters."""
    from wse.rtl.core_params import COUNTERS
    from wse.fabric.config import gemm_config
    from wse.runtime.system import SimulationError, open_system

    W, X = _load_matrix(w_path, "W"), _load_matrix(x_path, "X")
    if W.shape[1] != X.shape[0]:
        raise click.UsageError(f"shapes do not agree: W is {W.shape[0]}x{W.shape[1]}, so X "
                               f"must have {W.shape[1]} rows (in features), not {X.shape[0]}")
    options = {}
    if backend == "board":
        if board_name is None or port is None:
            raise click.UsageError("--backend board needs --board and --port")
        from wse.fpga.boards import board, mesh_config

        target = board(board_name)
        given = ctx.get_parameter_source("mesh") is not click.core.ParameterSource.DEFAULT
        config = mesh_config(target, *(mesh if given else target.default_mesh))
        mesh = config.shape
        options = {"port": port, "baud": baud or target.baud, "timeout": timeout}
    else:
        try:
            config = gemm_config(mesh, W.shape[0], W.shape[1], X.shape[1], raw=raw)
        except ValueError as error:
            raise click.ClickException(f"a {W.shape[0]}x{W.shape[1]} @ {X.shape[0]}x"
                                       f"{X.shape[1]} GEMM does not fit a {mesh[0]}x{mesh[1]} "
                                       f"mesh: {error}") from None
    with console.status(f"{backend}: {W.shape[0]}x{W.shape[1]} @ {X.shape[0]}x{X.shape[1]} on "
                        f"a {config}"):
        try:
            with open_system(backend, config, **options) as system:
                result = system.gemm(W, X, raw=raw, balance=not no_balance)
        except ValueError as error:
            raise click.ClickException(str(error)) from error
        except SimulationError as error:
            what = "the board" if backend == "board" else f"{backend} simulation"
            raise click.ClickException(f"{what} failed: {error}") from error
    if result.error:
        raise click.ClickException("the mesh reported an error (a dropped wavelet or a bad "
                                   "command); Y was not saved")
    y = result.y.astype(np.int32 if raw else np.int16)
    np.save(output, y, allow_pickle=False)
    console.print(f"saved {output}: {y.shape[0]}x{y.shape[1]} {y.dtype}"
                  f"{' (raw totals)' if raw else ''}", markup=False, highlight=False)
    if result.overflow:
        console.print("[yellow]overflow: some accumulation or requantisation saturated")
    ideal = result.program.ideal_cycles(X)
    if result.cycles is None:
        click.echo(f"golden model: no cycle count (ideal {ideal} cycles)")
    else:
        utilisation = f"{ideal / result.cycles:.2f}" if result.cycles else "-"
        link = " (the bridge's count: serial link included)" if backend == "board" else ""
        click.echo(f"compute phase: {result.cycles} cycles{link} (ideal {ideal}, utilisation "
                   f"{utilisation}); load {result.load_cycles}, read {result.read_cycles}")
    table = Table(title=f"counters of the compute phase, {mesh[0]}x{mesh[1]} mesh")
    for column in ("counter", "sum", "max per core"):
        table.add_column(column, justify="left" if column == "counter" else "right")
    for name in COUNTERS:
        values = result.counters[name]
        table.add_row(name, str(int(values.sum())), str(int(values.max())))
    Console().print(table)


_NPY_MAGIC = b"\x93NUMPY"


def _load_matrix(path, name):
    """A 2-D integer array from a ``.npy`` file, or a ``click.BadParameter`` saying why not."""
    def bad(message):
        return click.BadParameter(f"{path}: {message}", param_hint=f"{name}.npy")

    with open(path, "rb") as f:
        if f.read(len(_NPY_MAGIC)) != _NPY_MAGIC:
            raise bad("not a .npy file (save the array with numpy.save)")
    try:
        a = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as error:
        raise bad(f"not a readable .npy array ({error})") from None
    if a.ndim != 2:
        raise bad(f"{name} must be a 2-D array, not one of shape {a.shape}")
    if a.dtype.kind not in "iu":
        raise bad(f"{name} must hold integers, not {a.dtype} values")
    return a


# -- wse sim ------------------------------------------------------------------------------------

@main.group()
def sim():
    """Run cocotb testbenches on Verilator or Icarus."""


@sim.command("router")
@click.option("--sim", "simulator", type=SIMULATORS, default="verilator", show_default=True)
@click.option("--test", "testcase", default=None, metavar="NAME",
              help="Run one test (e.g. multicast); all of them by default.")
@click.option("--waves", is_flag=True, help="Record an FST waveform and print its path.")
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--fuzz", type=click.IntRange(min=1), default=None,
              help="Wavelets in random_traffic_fuzz (3000 by default).")
def sim_router(simulator, testcase, waves, seed, fuzz):
    """Run the router testbench (tb/router_tests.py) against its reference model."""
    from wse.sim.router_run import run_router_tests

    with console.status(f"building and running the router testbench on {simulator}"):
        try:
            result = run_router_tests(sim=simulator, testcase=testcase, waves=waves, seed=seed,
                                      fuzz=fuzz)
        except RuntimeError as error:
            raise click.ClickException(str(error)) from error
    if result.tests == 0:
        raise click.ClickException(f"no test matched {testcase!r}; see {result.test_dir}")
    log = (result.test_dir / "sim.log").read_text()
    for line in log.splitlines():
        if " INFO     test " in line:
            click.echo(line.split(" INFO     test ", 1)[1].strip())
    verdict = "passed" if result.passed else "FAILED"
    click.echo(f"{result.tests - result.failed}/{result.tests} tests {verdict} on {simulator} "
               f"(log: {result.test_dir / 'sim.log'})")
    for name, message in result.failures.items():
        click.echo(f"  {name}: {message}", err=True)
    if waves:
        if result.waves is None:
            raise click.ClickException(f"no waveform was written in {result.test_dir}")
        click.echo(f"waveform: {result.waves}")
    sys.exit(0 if result.passed else 1)


# -- wse bench ----------------------------------------------------------------------------------

@main.group()
def bench():
    """Measure, and print the figures (a table, or one JSON object with --json)."""


@bench.command("router")
@click.option("--sim", "simulator", type=SIMULATORS, default="verilator", show_default=True)
@click.option("--fuzz", type=click.IntRange(min=1), default=100_000, show_default=True,
              help="Wavelets in the random-traffic fuzz.")
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def bench_router(simulator, fuzz, seed, as_json):
    """Router throughput with all outputs saturated, hop latency, and a long fuzz, in RTL."""
    from wse.sim.router_bench import bench_router as measure

    with console.status(f"router bench on {simulator}: throughput, latency, "
                        f"{fuzz} fuzz wavelets"):
        try:
            figures = measure(sim=simulator, fuzz=fuzz, seed=seed)
        except RuntimeError as error:
            raise click.ClickException(str(error)) from error
    _print_figures(figures, f"router on {simulator}", as_json)


@bench.command("pe")
@click.option("--sim", "simulator", type=SIMULATORS, default="verilator", show_default=True)
@click.option("--lanes", type=click.IntRange(min=1), default=4, show_default=True,
              help="Tokens per cycle (a power of two dividing --tokens).")
@click.option("--tokens", type=click.IntRange(min=1), default=32, show_default=True,
              help="Local tokens per core (a power of two).")
@click.option("--weights", type=click.IntRange(min=2), default=400, show_default=True,
              help="Weights streamed per measurement point.")
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def bench_pe(simulator, lanes, tokens, weights, seed, as_json):
    """Cycles per weight against activation density, zero-weight and CR cost, in RTL."""
    from wse.rtl.core_params import CoreParams
    from wse.sim.tile_bench import bench_pe as measure

    try:
        CoreParams(n_feat=16, n_tok=tokens, n_out=8, lanes=lanes)
    except ValueError as error:
        raise click.BadParameter(str(error)) from error
    with console.status(f"PE bench on {simulator}: {lanes} lanes, {tokens} tokens"):
        try:
            figures = measure(sim=simulator, lanes=lanes, tokens=tokens, weights=weights,
                              seed=seed)
        except RuntimeError as error:
            raise click.ClickException(str(error)) from error
    _print_figures(figures, f"PE on {simulator}", as_json)


@bench.command("gemm")
@MESH_OPTION
@click.option("--sparsity", type=click.FloatRange(0, 1, max_open=True), default=0.9,
              show_default=True, help="Fraction of W0's weights pruned (by magnitude).")
@click.option("--out-features", type=click.IntRange(min=1), default=64, show_default=True)
@click.option("--in-features", type=click.IntRange(min=1), default=64, show_default=True)
@click.option("--tokens", type=click.IntRange(min=1), default=32, show_default=True)
@click.option("--act-sparsity", type=click.FloatRange(0, 1), default=0.0, show_default=True,
              help="Fraction of zero activations in X.")
@click.option("--backend", type=BACKENDS, default="verilator", show_default=True)
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout (nothing else).")
@click.option("--sweep", is_flag=True,
              help="Sparsities 0 to 0.99 instead of --sparsity; writes DIR/gemm_sweep.png "
                   "and DIR/gemm_sweep.json.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("bench/results"), show_default=True, metavar="DIR",
              help="Where --sweep writes its plot and figures.")
def bench_gemm(mesh, sparsity, out_features, in_features, tokens, act_sparsity, backend, seed,
               as_json, sweep, out_dir):
    """A magnitude-pruned GEMM against its dense original: cycles, speedup, utilisation, what
    limits it; every result checked bit for bit against the reference."""
    from wse.bench import gemm as gemm_bench
    from wse.fabric.config import gemm_config

    shape = {"out_features": out_features, "in_features": in_features, "tokens": tokens}
    sparsities = gemm_bench.SWEEP_SPARSITIES if sweep else (sparsity,)
    try:
        gemm_config(mesh, out_features, in_features, tokens)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--mesh / the shape") from error
    with console.status(f"GEMM bench on {backend}") as status:
        try:
            points = gemm_bench.sweep_gemm(sparsities, mesh=mesh, act_sparsity=act_sparsity,
                                           backend=backend, seed=seed, progress=status.update,
                                           **shape)
        except (RuntimeError, ValueError) as error:   # SimulationError is a RuntimeError
            raise click.ClickException(str(error)) from error
    if not sweep:
        _print_figures(points[0], f"sparse GEMM on {backend}", as_json)
        return
    out_dir.mkdir(parents=True, exist_ok=True)
    gemm_bench.plot_sweep(points, out_dir / "gemm_sweep.png")
    (out_dir / "gemm_sweep.json").write_text(json.dumps(points, indent=2) + "\n")
    console.print(f"wrote {out_dir / 'gemm_sweep.png'} and {out_dir / 'gemm_sweep.json'}",
                  markup=False, highlight=False)
    if as_json:
        click.echo(json.dumps(points))
        return
    _print_sweep(points)


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


# -- wse export ---------------------------------------------------------------------------------

@main.group(invoke_without_command=True, subcommand_metavar="[COMMAND [ARGS]...]")
@click.option("--mesh", default=None, metavar="RxC", callback=_mesh_shape,
              help="Write the mesh of RxC tiles as module wse_mesh (AXI4-Stream ports).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("mesh.v"), show_default=True, help="Where --mesh writes.")
@click.pass_context
def export(ctx, mesh, output):
    """Write Verilog (through the Yosys in sim/toolchain.env): the mesh with --mesh RxC, or a
    block by subcommand."""
    if ctx.invoked_subcommand is not None:
        given = ctx.get_parameter_source("output") is not click.core.ParameterSource.DEFAULT
        if mesh is not None or given:
            raise click.UsageError(f"--mesh and -o before {ctx.invoked_subcommand!r} are for "
                                   f"the mesh; give {ctx.invoked_subcommand}'s own options "
                                   f"after it")
        return
    if mesh is None:
        raise click.UsageError("give --mesh RxC (wse export --mesh 4x4 -o mesh.v) or a "
                               "subcommand (wse export router)")
    from wse.fabric.config import MeshConfig
    from wse.fabric.mesh import AxiStreamMesh
    from wse.sim.export import export_verilog

    top = AxiStreamMesh(MeshConfig(*mesh))
    with console.status(f"exporting a {mesh[0]}x{mesh[1]} mesh"):
        path = export_verilog(top, output, name="wse_mesh")
    _print_mesh_ports(top)
    click.echo(path)


def _print_mesh_ports(top):
    """The port summary of an exported mesh, on stderr."""
    def names(way):
        return [name for name, w, _, _ in top.mesh.ports if w == way]

    fields = " ".join(f"_{field}[{width - 1}:0]" for field, width in top.FIELDS[:2])
    console.print(f"module wse_mesh ({top.config.rows}x{top.config.cols} tiles of module "
                  f"wse_tile):\n"
                  f"  intakes  {', '.join(names('in'))}\n"
                  f"  outlets  {', '.join(names('out'))}\n"
                  f"  each stream: {fields} _tuser _tvalid _tready (no tlast)\n"
                  f"  error, overflow, idle; clk, rst (synchronous, active high)",
                  markup=False, highlight=False)


@export.command("router")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("router.v"), show_default=True)
@click.option("--colors", type=int, default=24, show_default=True)
@click.option("--queues", type=int, default=2, show_default=True)
@click.option("--depth", type=int, default=4, show_default=True)
@click.option("--cfg-color", default="31", show_default=True, metavar="COLOR|none",
              help="Configuration color, or 'none' for no run-time configuration.")
def export_router(output, colors, queues, depth, cfg_color):
    """The fabric router as Verilog module ``router`` (empty route table, run-time configured)."""
    from wse.rtl.router import Router
    from wse.sim.export import export_verilog

    try:
        cfg = None if cfg_color.lower() == "none" else int(cfg_color)
    except ValueError:
        raise click.BadParameter(f"must be a color or 'none', not {cfg_color!r}",
                                 param_hint="--cfg-color") from None
    try:
        router = Router(n_colors=colors, n_queues=queues, depth=depth, cfg_color=cfg)
    except ValueError as error:
        raise click.BadParameter(str(error)) from error
    click.echo(export_verilog(router, output, name="router"))


if __name__ == "__main__":
    main()
