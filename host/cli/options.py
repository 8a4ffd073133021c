"""Options the ``wse`` subcommands share (``host/cli/__init__.py``, ``host/cli/train.py``)."""

import click

__all__ = ["mesh_shape"]


def mesh_shape(ctx, param, value):
    """Click callback: ``--mesh RxC`` -> ``(rows, cols)``, or a ``BadParameter`` saying why."""
    from wse.fabric.config import parse_mesh

    if value is None:
        return None
    try:
        return parse_mesh(value)
    except ValueError as error:
        raise click.BadParameter(str(error), ctx=ctx, param=param) from None
