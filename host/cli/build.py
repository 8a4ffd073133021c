"""``wse build``: a bitstream for a board, and what it cost (LUTs, FFs, RAMs, DSPs, fmax)."""

import json
import sys
from pathlib import Path

import click

from .options import BOARDS, Number, make_directory, mesh_shape

__all__ = ["build"]


def _table(result):
    """The report as a two-column table for people."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    table = Table(box=box.SIMPLE, show_header=False)
    table.add_column(style="bold")
    table.add_column()
    core = ", ".join(f"{k}={v}" for k, v in result["config"].items() if k != "fmt" and v != "")
    rows = [
        ("board", f"{result['board']} ({result['device']})"),
        ("mesh", f"{result['mesh']} ({core})"),
        ("bitstream", result["bitstream"]),
        ("LUTs", f"{result['luts']} ({result['luts_per_pe']} per PE)"),
        ("FFs", str(result["ffs"])),
        ("block RAMs", str(result["brams"]) + (f" + {result['sprams']} SPRAM"
                                               if result["sprams"] else "")),
        ("DSPs", str(result["dsps"])),
        *((f"{name} (nextpnr)", f"{u['used']} of {u['available']} "
                                f"({100 * u['used'] / u['available']:.0f} %)")
          for name, u in result["utilisation"].items()
          if name in ("ICESTORM_LC", "TRELLIS_COMB")),
        ("fmax", f"{result['fmax_mhz']} MHz (target {result['target_mhz']} MHz: "
                 f"{'met' if result['timing_met'] else 'NOT met'})"),
        ("build", f"{result['seconds']} s"),
    ]
    for name, value in rows:
        table.add_row(name, value)
    Console().print(table)


@click.command()
@click.option("--board", "board_name", required=True, type=BOARDS, help="Board to build for.")
@click.option("--mesh", default=None, metavar="RxC", callback=mesh_shape,
              help="Rows x columns of tiles [default: the board's, see docs/fpga.md].")
@click.option("--out", "out", default="build/fpga", show_default=True,
              type=click.Path(file_okay=False, path_type=Path),
              help="Build directory (one folder per build).")
@click.option("--clock", "clock_mhz", type=Number(min=0, min_open=True), default=None,
              help="Target clock in MHz [default: the board's].")
@click.option("--seed", type=int, default=1, show_default=True, help="nextpnr placer seed.")
@click.option("--timeout", type=Number(min=0, min_open=True), default=None,
              envvar="WSE_BUILD_TIMEOUT",
              help="Give up after this many seconds [default: no limit; env WSE_BUILD_TIMEOUT].")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def build(board_name, mesh, out, clock_mhz, seed, timeout, as_json):
    """Build the bitstream of a mesh behind its serial bridge for BOARD and report its cost:
    LUTs, FFs, block RAMs, DSPs, fmax against the target clock."""
    from wse.fpga.build import BuildError
    from wse.fpga.build import build as run_build

    make_directory(out, "--out")
    try:
        result = run_build(board_name, mesh, out=out, seed=seed, timeout=timeout,
                           clk_hz=None if clock_mhz is None else clock_mhz * 1e6)
    except (BuildError, ValueError) as error:
        raise click.ClickException(str(error)) from None
    if as_json:
        json.dump(result, sys.stdout)
        sys.stdout.write("\n")
    else:
        _table(result)
