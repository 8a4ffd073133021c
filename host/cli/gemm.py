"""``wse gemm``: ``Y = W @ X`` on a mesh, on any backend, and its counters.

Its inputs are checked before the GEMM runs: ``W`` and ``X`` are read by
:func:`wse.host.npyio.load_npy` (which trusts no header), ``-o`` must name a ``.npy`` file in a
directory that exists and is writable, and ``Y`` replaces it atomically, so a failed run leaves
any earlier ``Y`` as it was.
"""

import os
import shutil
from pathlib import Path

import click
import numpy as np
from rich.console import Console
from rich.table import Table

from wse.host.npyio import ArrayFileError, load_npy

from .options import (
    BACKENDS,
    BOARD_BACKEND,
    BOARDS,
    FORMAT_OPTION,
    MESH_OPTION,
    Number,
    console,
    output_file,
)

__all__ = ["gemm"]


@click.command()
@click.argument("w_path", metavar="W.npy", type=click.Path(exists=True, dir_okay=False,
                                                           path_type=Path))
@click.argument("x_path", metavar="X.npy", type=click.Path(exists=True, dir_okay=False,
                                                           path_type=Path))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False, path_type=Path),
              callback=output_file(".npy", "Y"), metavar="Y.npy",
              help="Where to save Y: a name ending in .npy, in a directory that exists (an "
                   "existing file is replaced only when the GEMM succeeds).")
@MESH_OPTION
@click.option("--backend", type=BACKENDS, default="golden",
              show_default=True, help="What runs the mesh: a model, a simulator, or a board.")
@FORMAT_OPTION
@click.option("--raw", is_flag=True,
              help="Save the 32-bit totals (int32, or float32 in bf16) instead of Y requantised "
                   "to the operand format.")
@click.option("--no-balance", is_flag=True,
              help="Input features to rows by index (i % rows), not balanced by nonzeros.")
@click.option("--no-tune", is_flag=True,
              help="Run the compiler's default program, not the one the cycle model finds "
                   "fastest among its placements, spans and output orders.")
@click.option("--board", "board_name", type=BOARDS,
              default=None, help="--backend board: the board, whose bitstream fixes the cores "
                                 "(its default mesh unless --mesh is given).")
@click.option("--port", default=None, metavar="PORT",
              help="--backend board: the serial device or pyserial URL (socket://host:port).")
@click.option("--baud", type=click.IntRange(min=1), default=None,
              help="--backend board: the bridge's baud rate [default: the board's].")
@click.option("--timeout", type=Number(min=0, min_open=True), default=5.0,
              show_default=True, help="--backend board: seconds to wait for the bridge.")
@click.option("--waves", type=click.Path(dir_okay=False, path_type=Path),
              callback=output_file(".fst", "the waveform"), default=None, metavar="FILE.fst",
              help="A simulated RTL backend: record the whole run's waveform (FST) there.")
@click.pass_context
def gemm(ctx, w_path, x_path, output, mesh, backend, fmt, raw, no_balance, no_tune, board_name,
         port, baud, timeout, waves):
    """Y = W @ X on the mesh: W (out x in) and X (in x tokens), integer arrays in the int16
    range, or with --format bf16 any numbers (rounded to bf16, with a warning when they are not
    exactly representable). Saves Y (int16, or float32 holding bf16 values; --raw: the int32 or
    float32 totals), prints the compute-phase cycles and the counters."""
    from wse.fabric import numerics
    from wse.fabric.compiler import compile_gemm
    from wse.fabric.config import gemm_config
    from wse.fabric.tuning import tune_gemm
    from wse.rtl.core_params import COUNTERS
    from wse.runtime import SimulationError, open_system

    if backend != BOARD_BACKEND:
        given = [f"--{name.replace('_name', '')}" for name in ("board_name", "port", "baud",
                                                               "timeout")
                 if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT]
        if given:
            raise click.UsageError(f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} "
                                   f"for --backend {BOARD_BACKEND}, not {backend}")
    floats = fmt.is_float
    W, X = _load_matrix(w_path, "W", floats), _load_matrix(x_path, "X", floats)
    if W.shape[1] != X.shape[0]:
        raise click.UsageError(f"shapes do not agree: W is {W.shape[0]}x{W.shape[1]}, so X "
                               f"must have {W.shape[1]} rows (in features), not {X.shape[0]}")
    if floats:
        for name, values in (("W", W), ("X", X)):
            _, inexact = numerics.encode(fmt, values, name)
            if inexact:
                console.print(f"{name}: {inexact} of {values.size} values are not exactly "
                              f"representable in bf16; rounded to nearest even", style="yellow",
                              markup=False, highlight=False, soft_wrap=True)
        W, X = numerics.encode(fmt, W, "W")[0], numerics.encode(fmt, X, "X")[0]
    options = {}
    if waves is not None:
        from wse.runtime import RTL_SIMULATED

        if backend not in RTL_SIMULATED:
            raise click.UsageError(f"--waves needs a simulated RTL backend "
                                   f"({', '.join(RTL_SIMULATED)}), not {backend}")
        options["waves"] = waves if backend == "verilator" else True
    if backend == BOARD_BACKEND:
        if board_name is None or port is None:
            raise click.UsageError("--backend board needs --board and --port")
        from wse.fpga.boards import board, mesh_config

        target = board(board_name)
        given = ctx.get_parameter_source("mesh") is not click.core.ParameterSource.DEFAULT
        try:
            config = mesh_config(target, *(mesh if given else target.default_mesh))
        except ValueError as error:
            raise click.ClickException(f"{board_name}: {error}") from None
        if config.fmt != fmt:
            raise click.UsageError(f"{board_name}'s bitstream computes in "
                                   f"{config.fmt.name}, not {fmt.name} (--format)")
        mesh = config.shape
        options = {"port": port, "baud": baud or target.baud, "timeout": timeout}
    else:
        try:
            config = gemm_config(mesh, W.shape[0], W.shape[1], X.shape[1], raw=raw, fmt=fmt)
        except ValueError as error:
            raise click.ClickException(f"a {W.shape[0]}x{W.shape[1]} @ {X.shape[0]}x"
                                       f"{X.shape[1]} GEMM does not fit a {mesh[0]}x{mesh[1]} "
                                       f"mesh: {error}") from None
    try:    # compiled once: bad operands fail here, before a simulator or a board starts
        program = (compile_gemm if no_tune else tune_gemm)(config, W, X, raw=raw,
                                                           balance=not no_balance)
    except ValueError as error:
        raise click.ClickException(str(error)) from None
    with console.status(f"{backend}: {W.shape[0]}x{W.shape[1]} @ {X.shape[0]}x{X.shape[1]} on "
                        f"a {config}"):
        try:
            with open_system(backend, config, **options) as system:
                result = system.gemm(program)
            if waves is not None and backend != "verilator":    # cocotb: its run's file
                shutil.copyfile(system.result.waves, waves)
        except ValueError as error:
            raise click.ClickException(str(error)) from error
        except SimulationError as error:
            what = "the board" if backend == BOARD_BACKEND else f"{backend} simulation"
            raise click.ClickException(f"{what} failed: {error}") from error
    if result.error:
        raise click.ClickException("the mesh reported an error (a dropped wavelet or a bad "
                                   "command); Y was not saved")
    if floats:
        y = numerics.decode(fmt, result.y, raw=raw)
    else:
        y = result.y.astype(np.int32 if raw else np.int16)
    _save_npy(output, y)
    console.print(f"saved {output}: {y.shape[0]}x{y.shape[1]} {y.dtype}"
                  f"{' (raw totals)' if raw else ''}", markup=False, highlight=False)
    if waves is not None:
        console.print(f"waveform: {waves}", markup=False, highlight=False)
    if result.overflow:
        console.print("[yellow]overflow: some accumulation or requantisation "
                      + ("reached inf or NaN" if floats else "saturated"))
    ideal = result.program.ideal_cycles(X)
    if result.cycles is None:
        click.echo(f"golden model: no cycle count (ideal {ideal} cycles)")
    else:
        utilisation = f"{ideal / result.cycles:.2f}" if result.cycles else "-"
        link = " (the bridge's count: serial link included)" if backend == BOARD_BACKEND else ""
        click.echo(f"compute phase: {result.cycles} cycles{link} (ideal {ideal}, utilisation "
                   f"{utilisation}); load {result.load_cycles}, read {result.read_cycles}")
    if program.tuned:
        click.echo(f"program: the fastest of {program.tuned['candidates']} by the cycle model "
                   f"({program.tuned['cycles']} cycles, the default program "
                   f"{program.tuned['default_cycles']})")
    table = Table(title=f"counters of the compute phase, {mesh[0]}x{mesh[1]} mesh")
    for column in ("counter", "sum", "max per core"):
        table.add_column(column, justify="left" if column == "counter" else "right")
    for name in COUNTERS:
        values = result.counters[name]
        table.add_row(name, str(int(values.sum())), str(int(values.max())))
    Console().print(table)


def _save_npy(path, array):
    """Save ``array`` at ``path`` through a temporary file beside it, renamed over ``path`` only
    once complete: an earlier file there is never left half-written."""
    temp = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        with open(temp, "wb") as f:
            np.save(f, array, allow_pickle=False)
        os.replace(temp, path)
    except OSError as error:
        temp.unlink(missing_ok=True)
        raise click.ClickException(f"cannot save Y at {path}: {error.strerror or error}") \
            from None


def _load_matrix(path, name, floats=False):
    """A 2-D integer array (``floats``: of any real numbers) from a ``.npy`` file, or a
    ``click.BadParameter`` saying why not."""
    def bad(message):
        return click.BadParameter(message, param_hint=f"{name}.npy")

    try:
        a = load_npy(path)
    except (ArrayFileError, OSError) as error:
        raise bad(str(error)) from None
    if a.ndim != 2:
        raise bad(f"{path}: {name} must be a 2-D array, not one of shape {a.shape}")
    if a.dtype.kind not in ("iuf" if floats else "iu"):
        raise bad(f"{path}: {name} must hold {'real numbers' if floats else 'integers'}, not "
                  f"{a.dtype} values")
    return a
