"""``wse build``: a bitstream for a board, or one part (router, tile) alone for a device, and
what it cost (LUTs, FFs, RAMs, DSPs, fmax)."""

import json
import sys
from pathlib import Path

import click

from .options import BOARDS, FORMAT_OPTION, Number, RegistryChoice, make_directory, mesh_shape

__all__ = ["build"]


def _parts():
    from wse.fpga.parts import PARTS
    return PARTS


def _devices():
    from wse.fpga.parts import DEVICES
    return DEVICES


def _seeds(ctx, param, value):
    """Click callback: ``--seeds 1,2,3`` -> ``(1, 2, 3)``, or a ``BadParameter`` saying why."""
    from wse.fpga.parts import parse_seeds

    if value is None:
        return None
    try:
        return parse_seeds(value)
    except ValueError as error:
        raise click.BadParameter(str(error), ctx=ctx, param=param) from None


def _table(result):
    """The report as a two-column table for people."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    table = Table(box=box.SIMPLE, show_header=False)
    table.add_column(style="bold")
    table.add_column()
    from wse.rtl.numfmt import number_format

    fmt = number_format(result["config"].get("fmt"))
    core = ", ".join(f"{k}={v}" for k, v in result["config"].items() if k != "fmt" and v != "")
    core += f", {fmt.name}"
    rows = [
        ("board", f"{result['board']} ({result['device']})"),
        ("mesh", f"{result['mesh']} ({core}; tile module "
                 f"{'kept' if result.get('hierarchical') else 'flattened'})"),
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


def _part_table(result):
    """A part's report as a two-column table for people."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    table = Table(box=box.SIMPLE, show_header=False)
    table.add_column(style="bold")
    table.add_column()
    params = ", ".join(f"{k}={v}" for k, v in result["params"].items() if k != "fmt")
    fmax = ", ".join("-" if f is None else f"{f}" for f in result["fmax_mhz"])
    seeds = ", ".join(map(str, result["seeds"]))
    rows = [
        ("part", f"{result['part']} ({params})"),
        ("device", f"{result['device']} (out of context)"),
        ("LUT4", str(result["luts"])),
        ("LUT RAM", f"{result['lutram']} cells"),
        ("FFs", str(result["ffs"])),
        ("block RAMs", str(result["brams"])),
        ("DSPs", str(result["dsps"])),
        ("fmax", f"{result['fmax_mhz_min']}-{result['fmax_mhz_max']} MHz (seeds {seeds}: "
                 f"{fmax})" if result["fits"] else f"does not fit: {result['fit_error']}"),
        ("build", f"{result['seconds']} s, {result['build_dir']}"),
    ]
    for name, value in rows:
        table.add_row(name, value)
    Console().print(table)


@click.command()
@click.option("--board", "board_name", default=None, type=BOARDS,
              help="Board to build a bitstream for.")
@click.option("--part", default=None, type=RegistryChoice(_parts),
              help="Part to build alone, out of context, instead of a board (needs --device).")
@click.option("--device", default=None, type=RegistryChoice(_devices),
              help="Device a --part is built for.")
@click.option("--mesh", default=None, metavar="RxC", callback=mesh_shape,
              help="Rows x columns of tiles (with --part tile: the mesh the tile is for) "
                   "[default: the board's, see docs/fpga.md].")
@click.option("--out", "out", default="build/fpga", show_default=True,
              type=click.Path(file_okay=False, path_type=Path),
              help="Build directory (one folder per build).")
@click.option("--clock", "clock_mhz", type=Number(min=0, min_open=True), default=None,
              help="Target clock in MHz [default: the board's].")
@click.option("--flatten/--keep-tiles", default=None,
              help="Flatten every tile of a --board build into the top (each position folds its "
                   "straps), or synthesise the shared tile module once and keep it [default: "
                   "the board's: the ULX3S flattens, the iCEBreaker keeps; docs/fpga.md].")
@click.option("--seed", type=int, default=None, help="nextpnr placer seed of a board build "
              "[default: 1].")
@click.option("--seeds", default=None, metavar="N,N,...", callback=_seeds,
              help="nextpnr placer seeds of a --part build, run one after the other "
                   "[default: 1,2,3].")
@click.option("--timeout", type=Number(min=0, min_open=True), default=None,
              envvar="WSE_BUILD_TIMEOUT",
              help="Give up after this many seconds [default: no limit; env WSE_BUILD_TIMEOUT].")
@FORMAT_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def build(board_name, part, device, mesh, out, clock_mhz, flatten, seed, seeds, timeout, fmt,
          as_json):
    """Build the bitstream of a mesh behind its serial bridge for a --board and report its cost:
    LUTs, FFs, block RAMs, DSPs, fmax against the target clock. Or build one --part alone for a
    --device, out of context at 100 MHz once per seed, and report LUT4, LUT RAM, FFs, block
    RAMs, DSPs and fmax over the seeds (docs/fpga.md)."""
    _check_choice(board_name, part, device, mesh, clock_mhz, flatten, seed, seeds)
    if part == "router" and fmt.is_float:
        raise click.UsageError("--format applies to the tile and to boards; the router carries "
                               "wavelets whatever the format")
    overrides = {} if part == "router" else {"fmt": fmt}
    from wse.fpga.build import BuildError
    from wse.fpga.build import build as run_build
    from wse.fpga.parts import DEFAULT_SEEDS, build_part

    make_directory(out, "--out")
    try:
        if part is not None:
            result = build_part(part, device, seeds=seeds or DEFAULT_SEEDS, out=out, mesh=mesh,
                                timeout=timeout, params=overrides)
        else:
            result = run_build(board_name, mesh, out=out, seed=1 if seed is None else seed,
                               timeout=timeout,
                               keep_tiles=None if flatten is None else not flatten,
                               clk_hz=None if clock_mhz is None else clock_mhz * 1e6,
                               **overrides)
    except (BuildError, ValueError) as error:
        raise click.ClickException(str(error)) from None
    if as_json:
        json.dump(result, sys.stdout)
        sys.stdout.write("\n")
    elif part is not None:
        _part_table(result)
    else:
        _table(result)


def _check_choice(board_name, part, device, mesh, clock_mhz, flatten, seed, seeds):
    """A ``UsageError`` for options that do not go together: one of --board and --part, and
    each with only its own options."""
    if (board_name is None) == (part is None):
        raise click.UsageError("give one of --board and --part (they are exclusive)")
    given = {"--device": device, "--clock": clock_mhz, "--flatten": flatten, "--seed": seed,
             "--seeds": seeds}
    if board_name is not None:
        allowed = {"--clock", "--flatten", "--seed"}
    else:
        if device is None:
            raise click.UsageError("--part needs --device")
        allowed = {"--device", "--seeds"}
        if part != "tile" and mesh is not None:
            raise click.UsageError(f"--mesh does not apply to --part {part}")
    extra = [name for name, value in given.items() if value is not None and name not in allowed]
    if extra:
        raise click.UsageError(f"{', '.join(extra)} does not apply to "
                               f"{'--board' if board_name is not None else '--part'}")
