"""Options the ``wse`` subcommands share (``host/cli/__init__.py``, ``host/cli/train.py``)."""

import click
from rich.console import Console

__all__ = ["BACKENDS", "MESH_OPTION", "SIMULATORS", "console", "mesh_shape"]

SIMULATORS = click.Choice(["verilator", "icarus"])
BACKENDS = click.Choice(["golden", "verilator", "icarus"])    # the simulating runtime.system.BACKENDS

#: Progress and messages go to stderr; results (tables, JSON) to stdout.
console = Console(stderr=True)


def mesh_shape(ctx, param, value):
    """Click callback: ``--mesh RxC`` -> ``(rows, cols)``, or a ``BadParameter`` saying why."""
    from wse.fabric.config import parse_mesh

    if value is None:
        return None
    try:
        return parse_mesh(value)
    except ValueError as error:
        raise click.BadParameter(str(error), ctx=ctx, param=param) from None


MESH_OPTION = click.option("--mesh", default="4x4", show_default=True, metavar="RxC",
                           callback=mesh_shape, help="Rows x columns of tiles.")
