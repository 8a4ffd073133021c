"""``wse train``: weight-streaming training of digits on one or more meshes (``docs/host.md``):
the command, its progress display, its summary table and :func:`plot_training`.

Everything that can be checked before training is: the options (exclusive ``--epochs`` and
``--steps``, finite numbers), the settings (:class:`wse.host.train.TrainSettings`), the
``--resume`` file's existence, and ``--out DIR``, created up front, so that a run never ends in
an error about where to write its results.
"""

import json
from pathlib import Path

import click
import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from wse.host.train import TrainSettings
from wse.rtl import validate

from .options import (
    FORMAT_OPTION,
    MODEL_BACKENDS,
    Number,
    RegistryChoice,
    console,
    make_directory,
    mesh_shape,
)

#: The options' defaults are the settings' own (one place to change them).
DEFAULT = TrainSettings()

__all__ = ["train", "plot_training"]


def _transports():
    from wse.host.swarmx import TRANSPORTS
    return TRANSPORTS


def _prune_kinds():
    from wse.host.sparsity import KINDS
    return KINDS


def _optimizers():
    from wse.host.optim import OPTIMIZERS
    return OPTIMIZERS


def _widths(ctx, param, value):
    """Click callback: ``--hidden 64,32`` -> ``(64, 32)``, or a ``BadParameter``."""
    try:
        return tuple(validate.count("width", int(w)) for w in value.split(","))
    except ValueError:
        raise click.BadParameter(f"must be comma-separated positive widths such as 64 or "
                                 f"512,512, not {value!r}", ctx=ctx, param=param) from None


@click.command()
@click.option("--mesh", default="x".join(map(str, DEFAULT.mesh)), show_default=True,
              metavar="RxC", callback=mesh_shape, help="Rows x columns of tiles of every system.")
@click.option("--systems", type=click.IntRange(min=1), default=DEFAULT.systems, show_default=True,
              help="Meshes the batch is split across (data parallel).")
@click.option("--fanout", type=click.IntRange(min=2), default=DEFAULT.fanout, show_default=True,
              help="SwarmX's tree fan-out.")
@click.option("--swarm", type=RegistryChoice(_transports), default=DEFAULT.swarm,
              show_default=True, help="How SwarmX reaches the systems.")
@click.option("--address", default=None, metavar="ADDR",
              help="A Ray cluster to join (--swarm ray); a local Ray is started otherwise.")
@click.option("--backend", type=MODEL_BACKENDS, default=DEFAULT.backend, show_default=True,
              help="What runs each mesh.")
@FORMAT_OPTION
@click.option("--hidden", default=",".join(map(str, DEFAULT.hidden)), show_default=True,
              callback=_widths, metavar="W[,W...]", help="Hidden layer widths (64-...-10).")
@click.option("--sparsity", type=Number(0, 1, max_open=True), default=DEFAULT.sparsity,
              show_default=True, help="Weight sparsity of the hidden layers.")
@click.option("--prune", type=RegistryChoice(_prune_kinds), default=DEFAULT.prune,
              show_default=True, help="How sparsity is induced.")
@click.option("--epochs", type=click.IntRange(min=1), default=None,
              help="Epochs to train [default: 10 unless --steps is given].")
@click.option("--steps", type=click.IntRange(min=1), default=None,
              help="Steps to train (instead of --epochs, not with it).")
@click.option("--batch", type=click.IntRange(min=1), default=DEFAULT.batch, show_default=True)
@click.option("--optimizer", type=RegistryChoice(_optimizers), default=DEFAULT.optimizer,
              show_default=True)
@click.option("--lr", type=Number(min=0, min_open=True), default=DEFAULT.lr,
              show_default=True)
@click.option("--seed", type=int, default=DEFAULT.seed, show_default=True)
@click.option("--memory-bytes", type=click.IntRange(min=0), default=None,
              help="Bound MemoryX's in-memory tier; the rest spills to disk.")
@click.option("--resume", "resume_path",
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help="Continue from this checkpoint.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              default=None, metavar="DIR",
              help="Write DIR/report.json, DIR/checkpoint.npz and the PNG plots (DIR is "
                   "created before training starts).")
@click.option("--checkpoint-every", type=click.IntRange(min=1), default=None, metavar="N",
              help="Also checkpoint to DIR/checkpoint-<step>.npz every N steps (needs --out).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
@click.option("--check-golden", is_flag=True,
              help="Compare every mesh result with the golden model, bit for bit.")
def train(mesh, systems, fanout, swarm, address, backend, fmt, hidden, sparsity, prune, epochs,
          steps, batch, optimizer, lr, seed, memory_bytes, resume_path, out_dir,
          checkpoint_every, as_json, check_golden):
    """Train a 64-64-10 ReLU network on scikit-learn's digits by weight streaming: MemoryX
    streams each layer, SwarmX broadcasts it to the systems and sums their gradients."""
    from wse.host.numbers import format_name
    from wse.host.train import Trainer

    if address is not None and swarm != "ray":
        raise click.UsageError(f"--address joins a Ray cluster: it needs --swarm ray, not "
                               f"--swarm {swarm}")
    if steps is not None and epochs is not None:
        raise click.UsageError("--epochs and --steps are exclusive: give one of them")
    if steps is None and epochs is None:
        epochs = DEFAULT.epochs
    if checkpoint_every is not None and out_dir is None:
        raise click.UsageError("--checkpoint-every needs --out DIR")
    if check_golden and backend == "golden":     # the reference itself
        console.print("--check-golden: the golden backend is the reference; nothing to compare",
                      markup=False, highlight=False)
    try:
        settings = TrainSettings(mesh=mesh, systems=systems, fanout=fanout, swarm=swarm,
                                 address=address, backend=backend,
                                 format=format_name(fmt), hidden=hidden,
                                 sparsity=sparsity, prune=prune, epochs=epochs, steps=steps,
                                 batch=batch, optimizer=optimizer, lr=lr, seed=seed,
                                 memory_bytes=memory_bytes, check_golden=check_golden)
    except ValueError as error:
        raise click.UsageError(str(error)) from None
    if out_dir is not None:
        make_directory(out_dir, "--out")
    try:
        with console.status(f"starting {systems} {backend} system(s) over {swarm}"):
            trainer = Trainer(settings, resume=resume_path)
    except (RuntimeError, ValueError) as error:
        raise click.ClickException(str(error)) from None
    except MemoryError as error:
        raise click.ClickException(f"out of memory building the model ({error}): narrow "
                                   f"--hidden, or bound --memory-bytes") from None
    notes = list(trainer.sizing.blocked.values())     # a layer the cores cannot hold whole
    if trainer.sizing.why_not:
        notes.append(f"activations go through the edges between layers: "
                     f"{trainer.sizing.why_not}")
    for line in notes:
        console.print(f"note: {line}", style="yellow", markup=False, highlight=False)
    with trainer:
        report = _run(trainer, out_dir, checkpoint_every)
        if out_dir is not None:
            _write_results(trainer, report, out_dir)
    if as_json:
        click.echo(json.dumps({k: v for k, v in report.items() if k != "history"}))
    else:
        _summary(report)
    if report["gradient_overflows"]:
        console.print(f"warning: {report['gradient_overflows']} weight-gradient pass(es) "
                      f"saturated a 32-bit accumulator: those gradients are clipped, and the "
                      f"same digest on any number of systems is not guaranteed for this run",
                      style="yellow", markup=False, highlight=False)
    if report["mismatches"]:
        raise click.ClickException(f"{report['mismatches']} mesh result(s) differed from the "
                                   f"golden model (--check-golden)")


def _run(trainer, out_dir=None, checkpoint_every=None):
    columns = (TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[figures]}"), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task("train", total=trainer.total_steps,
                                 completed=trainer.step_index, figures="")
        state = {"test": None}

        def on_step(r):
            if checkpoint_every and trainer.step_index % checkpoint_every == 0:
                path = out_dir / f"checkpoint-{trainer.step_index:06d}.npz"
                try:
                    trainer.save(path)
                except OSError as error:
                    raise click.ClickException(f"cannot write {path}: "
                                               f"{error.strerror or error}") from None
            test = "" if state["test"] is None else f" test {state['test']:.3f}"
            progress.update(task, advance=1, figures=(
                f"loss {r['loss']:.3f} acc {r['accuracy']:.2f}{test} cycles "
                f"{r['mesh_cycles']} (dense {r['dense_cycles']})"))

        def on_epoch(step, accuracy):
            state["test"] = accuracy

        try:
            return trainer.run(on_step=on_step, on_epoch=on_epoch)
        except (RuntimeError, ValueError, AssertionError) as error:
            raise click.ClickException(str(error)) from None
        except MemoryError as error:
            raise click.ClickException(f"out of memory at step {trainer.step_index + 1} "
                                       f"({error}): narrow --hidden or --batch") from None


def _write_results(trainer, report, out_dir):
    """The final checkpoint, the plots and ``report.json`` in ``out_dir`` (already created)."""
    try:
        report["checkpoint"] = str(out_dir / "checkpoint.npz")
        trainer.save(out_dir / "checkpoint.npz")
        report["plots"] = [str(p) for p in plot_training(report, out_dir)]
        (out_dir / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    except OSError as error:
        raise click.ClickException(f"cannot write the results in {out_dir}: "
                                   f"{error.strerror or error}") from None
    console.print(f"wrote {out_dir / 'report.json'}, the checkpoint and the plots",
                  markup=False, highlight=False)


def _summary(report):
    table = Table(title=f"wse train: {report['model']} on {report['systems']} x "
                        f"{report['mesh']} {report['backend']} ({report['swarm']})")
    table.add_column("figure")
    table.add_column("value", justify="right")
    rows = {k: report[k] for k in ("format", "test_accuracy", "weight_sparsity", "steps",
                                   "final_loss", "mesh_cycles", "io_cycles", "compute_cycles",
                                   "dense_cycles", "speedup_vs_dense", "ideal_speedup")}
    for name in report["cycles_by_pass"]:
        speedup = report["speedup_by_pass"][name]
        rows[f"{name} pass"] = (f"{report['cycles_by_pass'][name]} cycles, "
                                f"{report['io_cycles_by_pass'][name]} of them io (dense "
                                f"{report['dense_cycles_by_pass'][name]}, "
                                + ("-" if speedup is None else f"{speedup:.2f}x") + ")")
    rows |= {k: report[k] for k in ("cycles_source", "gradient_source", "checked_results",
                                    "mismatches", "mesh_overflows", "gradient_overflows",
                                    "model_bytes", "mesh_sram_bytes", "seconds",
                                    "weights_digest")}
    rows |= {f"swarmx {k}": report["swarmx"][k] for k in ("tree_depth", "links",
                                                          "bytes_per_link")}
    for name, value in rows.items():
        table.add_row(name, f"{value:.4f}" if isinstance(value, float) else str(value))
    Console().print(table)


def plot_training(report, out_dir):
    """``loss.png`` (loss and accuracy per step, test accuracy per epoch) and ``cycles.png``
    (mesh cycles per step against the dense equivalent); returns their paths."""
    from matplotlib.figure import Figure  # drawn by Agg, without pyplot's global state

    history = report["history"]
    steps = np.array([r["step"] for r in history])
    title = (f"{report['model']} on digits, {report['systems']} x {report['mesh']} "
             f"{report['backend']}, {report['weight_sparsity']:.0%} hidden sparsity")
    fig = Figure(figsize=(7, 4.8), layout="constrained")
    ax = fig.subplots()
    ax.plot(steps, [r["loss"] for r in history], color="C0", lw=0.8, label="training loss")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    right = ax.twinx()
    right.plot(steps, [r["accuracy"] for r in history], color="C1", lw=0.5, alpha=0.6,
               label="batch accuracy")
    evals = report["evaluations"]
    right.plot([e["step"] for e in evals], [e["test_accuracy"] for e in evals], "o-",
               color="C2", label="test accuracy")
    right.set_ylim(0, 1.02)
    right.set_ylabel("accuracy")
    fig.legend(loc="outside lower center", ncols=3)
    ax.set_title(title, fontsize=9)
    loss_png = out_dir / "loss.png"
    fig.savefig(loss_png, dpi=120)

    fig = Figure(figsize=(7, 4.5), layout="tight")
    ax = fig.subplots()
    ax.plot(steps, [r["dense_cycles"] for r in history], color="0.5", label="dense equivalent")
    ax.plot(steps, [r["mesh_cycles"] for r in history], color="C0",
            label=f"sparse, streamed ({report['cycles_source']})")
    ax.set_xlabel("step")
    ax.set_ylabel("mesh cycles per step (slowest system)")
    ax.set_ylim(bottom=0)
    ax.legend()
    ax.set_title(title, fontsize=9)
    cycles_png = out_dir / "cycles.png"
    fig.savefig(cycles_png, dpi=120)
    return loss_png, cycles_png
