"""``wse``: the one command line of wse-mini.

Subcommands grow with the project: ``wse sim`` runs cocotb testbenches, ``wse bench`` measures,
``wse export`` writes Verilog.
"""

import json
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

__all__ = ["main"]

SIMULATORS = click.Choice(["verilator", "icarus"])

console = Console(stderr=True)


@click.group()
@click.version_option(package_name="wse-mini")
def main():
    """wse-mini: a wafer-scale engine in miniature (Amaranth RTL, cocotb, numpy)."""


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
    from sim.router_run import run_router_tests

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
    from sim.router_bench import bench_router as measure

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
    from rtl.core_params import CoreParams
    from sim.tile_bench import bench_pe as measure

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
        elif isinstance(value, float):
            value = f"{value:.3f}"
        table.add_row(name, str(value))
    Console().print(table)


# -- wse export ---------------------------------------------------------------------------------

@main.group()
def export():
    """Write Verilog for a block (through the Yosys in sim/toolchain.env)."""


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
    from rtl.router import Router
    from sim.export import export_verilog

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
