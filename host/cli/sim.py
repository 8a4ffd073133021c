"""``wse sim``: the cocotb testbenches on a simulator, their verdicts and a waveform."""

import sys

import click

from .options import SIMULATORS, console

__all__ = ["sim"]


@click.group()
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
