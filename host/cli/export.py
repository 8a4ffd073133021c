"""``wse export``: the mesh (with a Verilator configuration and a FuseSoC core beside it) or the
router as Verilog."""

import contextlib
import re
from pathlib import Path

import click

from .options import FORMAT_OPTION, console, mesh_shape, output_file

__all__ = ["export"]

#: MeshConfig fields ``wse export --mesh`` sets, as (option, field, click type, help).
_CORE_OPTIONS = (
    ("--n-feat", "n_feat", int, "Input features a core holds."),
    ("--n-tok", "n_tok", int, "Tokens a core holds (a power of two)."),
    ("--n-out", "n_out", int, "Output features a core owns."),
    ("--lanes", "lanes", int, "MAC lanes per core (a power of two dividing --n-tok)."),
    ("--depth", "depth", int, "Router input queue depth."),
    ("--acc-buffers", "acc_buffers", int, "Accumulator buffers per core."),
    ("--psum-depth", "psum_depth", int, "Psum FIFO depth per core."),
    ("--counter-adders", "counter_adders", int,
     "32-bit adders of each core's counters: 1, or 2 (the same counts on a shorter path)."),
    ("--held-copies", "held_copies", int,
     "Copies of each core's command FIFO's held parts: 1, or 2 (the same cycles, a shorter "
     "path on the ECP5)."),
    ("--tag-slots", "tag_slots", bool,
     "With 2-deep router queues, each slot's tags in a memory of their own: true, or false "
     "(the same cycles; a shorter path on the ECP5)."),
    ("--edges", "edges", str, "Edges (of NESW) with ports in both directions as well."),
)


class _ConfigOption(click.Option):
    """An option for a MeshConfig field: its help shows MeshConfig's default, looked up only
    when help is shown (importing the fabric costs a fifth of a second at every start)."""

    def get_help_record(self, ctx):
        from wse.fabric.config import MeshConfig

        default = MeshConfig.__dataclass_fields__[self.name].default
        record = super().get_help_record(ctx)
        return record[0], f"{record[1]}  [default: {default!r}]"


def _core_options(command):
    for option, name, kind, text in reversed(_CORE_OPTIONS):
        command = click.option(option, name, cls=_ConfigOption, type=kind, default=None,
                               help=text)(command)
    return command


_VERILOG = output_file(".v", "the Verilog")


def _verilog_path(ctx, param, value):
    """Click callback: ``-o`` must name the Verilog file (``.v``, in a writable directory that
    exists), not one of the two written beside it."""
    if value is not None and value.suffix in (".vlt", ".core"):
        raise click.BadParameter(f"must be the Verilog file (such as mesh.v), not {value}: "
                                 f"the {value.suffix} file is written beside it", ctx=ctx,
                                 param=param)
    value = _VERILOG(ctx, param, value)
    for beside in () if value is None else (value.with_suffix(".vlt"), value.with_suffix(".core")):
        if beside.is_dir() or (beside.is_symlink() and not beside.exists()):
            raise click.BadParameter(f"{beside}, written beside the Verilog, is "
                                     f"{'a directory' if beside.is_dir() else 'a dangling link'}",
                                     ctx=ctx, param=param)
    return value


@click.group(invoke_without_command=True, subcommand_metavar="[COMMAND [ARGS]...]")
@click.option("--mesh", default=None, metavar="RxC", callback=mesh_shape,
              help="Write the mesh of RxC tiles as module wse_mesh (AXI4-Stream ports).")
@_core_options
@FORMAT_OPTION
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("mesh.v"), show_default=True, callback=_verilog_path,
              help="Where --mesh writes the Verilog; <stem>.vlt (Verilator lint waivers) and "
                   "<stem>.core (FuseSoC core) go beside it.")
@click.pass_context
def export(ctx, mesh, output, fmt, **core):
    """Write Verilog (through the Yosys in sim/toolchain.env): the mesh with --mesh RxC, or a
    block by subcommand.

    With --mesh: module wse_mesh in the -o file, a Verilator configuration waiving the warnings
    Verilator -Wall raises on it, and a FuseSoC core naming both; the ports and the core
    parameters go to stderr, the three paths to stdout.
    """
    core = {name: value for name, value in core.items() if value is not None}
    if ctx.invoked_subcommand is not None:
        given = [name for name in ("output", "fmt")
                 if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT]
        if mesh is not None or given or core:
            raise click.UsageError(f"--mesh, -o, --format and the core options before "
                                   f"{ctx.invoked_subcommand!r} are for the mesh; give "
                                   f"{ctx.invoked_subcommand}'s own options after it")
        return
    if mesh is None:
        raise click.UsageError("give --mesh RxC (wse export --mesh 4x4 -o mesh.v) or a "
                               "subcommand (wse export router)")
    from wse.sim.export_mesh import export_mesh

    config = _mesh_config(ctx, mesh, {**core, "fmt": fmt})
    with console.status(f"exporting a {mesh[0]}x{mesh[1]} mesh and linting it"), \
            _writing(output):
        written = export_mesh(config, output)
    _print_mesh(written)
    if written.unwaived:
        raise click.ClickException(
            f"Verilator -Wall raises {', '.join(written.unwaived)} on {written.verilog}, which "
            f"{written.vlt.name} does not waive (no reason in wse.sim.export_mesh.WAIVERS): "
            f"fix the cause or record why it is safe")
    for path in (written.verilog, written.vlt, written.core):
        click.echo(path)


@contextlib.contextmanager
def _writing(output):
    """A file that cannot be written as ``-o`` asks is one ``Error:`` line naming it."""
    try:
        yield
    except OSError as error:
        where = error.filename or output
        raise click.ClickException(f"cannot write {where}: {error.strerror or error}") \
            from None


def _mesh_config(ctx, mesh, core):
    """The MeshConfig of ``--mesh`` and the core options; a ``BadParameter`` naming the option
    (or options) a ``ValueError`` of MeshConfig is about (``"<name> must be ..."``)."""
    from wse.fabric.config import MeshConfig

    try:
        return MeshConfig(*mesh, **core)
    except ValueError as error:
        message = str(error)
        subject = message.split(" must ")[0]        # "n_feat * n_tok must be at most ..."
        named = [option for option, name, _, _ in _CORE_OPTIONS
                 if re.search(rf"\b{name}\b", subject)]
        if re.search(r"\b(rows|cols|mesh)\b", subject):
            named.insert(0, "--mesh")
        hint = " / ".join(f"'{option}'" for option in named) or None
        raise click.BadParameter(message, ctx=ctx, param_hint=hint) from None


def _print_mesh(written):
    """The ports and core parameters of an exported mesh, on stderr."""
    from wse.fabric.mesh import AxiStreamMesh
    from wse.sim.export_mesh import core_parameters

    config = written.config

    def names(way):
        return [name for name, w in written.ports if w == way]

    fields = " ".join(f"_{field}[{width - 1}:0]" for field, width in AxiStreamMesh.FIELDS[:2])
    params = ", ".join(f"{name}={value}" for name, (value, _) in core_parameters(config).items()
                       if name not in ("rows", "cols") and value != "")
    lines = [f"module wse_mesh ({config.rows}x{config.cols} tiles of module wse_tile):",
             f"  intakes  {', '.join(names('in'))}",
             f"  outlets  {', '.join(names('out'))}",
             f"  each stream: {fields} _tuser _tvalid _tready (no tlast)",
             "  error, overflow, idle; clk, rst (synchronous, active high; hold rst high for "
             "at least one rising clk edge and tvalid low while it is)",
             f"  core parameters: {params}",
             f"  Verilator -Wall: {sum(written.warnings.values())} warnings of "
             f"{len(written.warnings)} rules on the Verilog alone, waived in {written.vlt.name}"]
    if written.unwaived:
        lines.append(f"  NOT waived (no reason recorded in sim.export_mesh.WAIVERS): "
                     f"{', '.join(written.unwaived)}")
    console.print("\n".join(lines), markup=False, highlight=False, soft_wrap=True)


@export.command("router")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("router.v"), show_default=True, callback=_VERILOG)
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
    with _writing(output):
        click.echo(export_verilog(router, output, name="router"))

