"""``wse export``: the mesh or the router as Verilog."""

from pathlib import Path

import click

from .options import console, mesh_shape


@click.group(invoke_without_command=True, subcommand_metavar="[COMMAND [ARGS]...]")
@click.option("--mesh", default=None, metavar="RxC", callback=mesh_shape,
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

