"""What the ``wse`` commands share: their choices, read from the registries the code dispatches
on (a new board, backend or simulator appears in ``--help`` without touching the command line),
the ``--mesh`` option, a finite-number parameter type checked by :mod:`wse.rtl.validate`,
:func:`make_directory` for output folders, and the console that progress and messages go to.

A registry is imported when its choices are first needed (parsing or ``--help`` of the command
that has them), so ``wse --help`` and the other commands do not import the hardware behind it.
"""

import functools
import os
import tempfile

import click
from rich.console import Console

from wse.rtl import validate

__all__ = ["BACKENDS", "BOARD_BACKEND", "BOARDS", "FORMAT_OPTION", "MAX_ROWS", "MESH_OPTION",
           "MODEL_BACKENDS", "Number", "RegistryChoice", "SIMULATORS", "console",
           "make_directory", "mesh_shape", "output_file"]

#: The backend that runs a mesh on a board over its serial bridge: it needs ``--board`` and
#: ``--port``, which only ``wse gemm`` has.
BOARD_BACKEND = "board"


class RegistryChoice(click.Choice):
    """A ``click.Choice`` of the names in a registry, read on first use from ``registry()``
    (a function returning the registry: a sequence or a dict of names), less ``exclude``."""

    def __init__(self, registry, *, exclude=()):    # not Choice.__init__: choices come later
        self._registry = registry
        self._exclude = tuple(exclude)
        self.case_sensitive = True

    @functools.cached_property
    def choices(self):
        return tuple(name for name in self._registry() if name not in self._exclude)


def _simulators():
    from wse.sim.cocotb_run import SIMULATORS
    return SIMULATORS


def _backends():
    from wse.runtime.backends import BACKENDS
    return BACKENDS


def _boards():
    from wse.fpga.boards import BOARDS
    return BOARDS


#: ``--sim``: the simulators cocotb runs (:data:`wse.sim.cocotb_run.SIMULATORS`).
SIMULATORS = RegistryChoice(_simulators)
#: ``wse gemm --backend``: every backend of :func:`wse.runtime.open_system`.
BACKENDS = RegistryChoice(_backends)
#: ``--backend`` of the commands without a serial port: the model and the simulators.
MODEL_BACKENDS = RegistryChoice(_backends, exclude=[BOARD_BACKEND])
#: ``--board``: the boards of :data:`wse.fpga.boards.BOARDS`.
BOARDS = RegistryChoice(_boards)

#: Progress and messages go to stderr; results (tables, JSON) to stdout.
console = Console(stderr=True)


class Number(click.FloatRange):
    """A finite float in a range, checked by :func:`wse.rtl.validate.number` (``nan`` and
    ``inf`` are refused, which ``click.FloatRange`` lets through); ``--help`` shows the range
    as ``click.FloatRange`` does."""

    def convert(self, value, param, ctx):
        name = param.opts[0] if param is not None and param.opts else "value"
        try:
            return validate.number(name, value, self.min, self.max, open_lo=self.min_open,
                                   open_hi=self.max_open)
        except ValueError as error:
            self.fail(str(error), param, ctx)


def make_directory(path, option):
    """Create the output directory ``path`` (with its parents) before any long work, or raise a
    ``click.BadParameter`` for ``option`` saying why it cannot be written."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise click.BadParameter(f"cannot create the directory {path}: "
                                 f"{error.strerror or error}", param_hint=option) from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise click.BadParameter(f"the directory {path} is not writable", param_hint=option)
    return path


def output_file(suffix, what):
    """A click callback for an output file option: the ``Path`` if it ends in ``suffix`` and
    its directory exists and is writable, else a ``BadParameter`` saying why (checked when the
    option is parsed, so before any long work). ``what`` names the file in messages."""
    def check(ctx, param, value):
        if value is None:       # shell completion parses without values
            return value
        if value.suffix != suffix:
            raise click.BadParameter(f"{what}'s file name must end in {suffix}, not "
                                     f"{str(value)!r}", ctx=ctx, param=param)
        folder = value.parent
        if not folder.exists():
            raise click.BadParameter(f"the directory {folder} does not exist (create it first)",
                                     ctx=ctx, param=param)
        if not folder.is_dir():
            raise click.BadParameter(f"{folder} is not a directory", ctx=ctx, param=param)
        if not os.access(folder, os.W_OK | os.X_OK):
            raise click.BadParameter(f"the directory {folder} is not writable", ctx=ctx,
                                     param=param)
        if value.is_symlink() and not value.exists():
            raise click.BadParameter(f"{value} is a dangling symbolic link (to "
                                     f"{os.readlink(value)}): remove it or name another file",
                                     ctx=ctx, param=param)
        if value.is_dir():
            raise click.BadParameter(f"{value} is a directory", ctx=ctx, param=param)
        try:        # what the permission bits do not tell (such as /proc, or a full disk)
            with tempfile.TemporaryFile(dir=folder):
                pass
        except OSError as error:
            raise click.BadParameter(f"cannot write files in {folder}: "
                                     f"{error.strerror or error}", ctx=ctx,
                                     param=param) from None
        return value
    return check


#: ``--mesh``'s rows at most: a mesh's programs, route plans and golden model grow with the
#: square of its rows (1024 rows: seconds; 4096: tens of seconds; far beyond: hours or no memory).
MAX_ROWS = 1024


def mesh_shape(ctx, param, value):
    """Click callback: ``--mesh RxC`` -> ``(rows, cols)``, or a ``BadParameter`` saying why
    (at most :data:`MAX_ROWS` rows and :data:`wse.fabric.routes.MAX_COLS` columns)."""
    from wse.fabric.config import parse_mesh
    from wse.fabric.routes import MAX_COLS

    if value is None:
        return None
    try:
        rows, cols = parse_mesh(value)
    except ValueError as error:
        raise click.BadParameter(str(error), ctx=ctx, param=param) from None
    if rows > MAX_ROWS:
        raise click.BadParameter(f"mesh must have at most {MAX_ROWS} rows, not {rows}",
                                 ctx=ctx, param=param)
    if cols > MAX_COLS:
        raise click.BadParameter(f"mesh must have at most {MAX_COLS} columns (configuration "
                                 f"reaches a tile at most {MAX_COLS - 1} hops from its row's "
                                 f"intake), not {cols}", ctx=ctx, param=param)
    return rows, cols


MESH_OPTION = click.option("--mesh", default="4x4", show_default=True, metavar="RxC",
                           callback=mesh_shape, help="Rows x columns of tiles.")


def _format(ctx, param, value):
    """Click callback: ``--format NAME`` -> the number format object."""
    from wse.rtl.numfmt import number_format

    return None if value is None else number_format(value)


#: ``--format``: the datapath's number format (:data:`wse.rtl.numfmt.FORMATS`), given to the
#: command as ``fmt``, a format object.
FORMAT_OPTION = click.option("--format", "fmt", type=click.Choice(["int16", "bf16"]),
                             default="int16", show_default=True, callback=_format,
                             help="Number format of the datapath: int16 fixed point (8 fraction "
                                  "bits, 32-bit accumulators) or bf16 operands with binary32 "
                                  "accumulation (docs/numerics.md).")
