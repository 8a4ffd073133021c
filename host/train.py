"""Weight-streaming training of a real network on the mesh (``docs/host.md``).

Per step, for a batch split into one shard per system:

1. MemoryX applies the sparsity schedule, then streams layer by layer; SwarmX broadcasts each
   layer; every system runs the forward pass on its shard, keeping its activations
   (:class:`~host.worker.MeshWorker`); only the last layer's logits come back.
2. The host computes the softmax cross-entropy and ``dlogits = softmax - onehot`` for the whole
   batch, scaled by ``loss_scale`` and quantised to the datapath format.
3. Top layer down: MemoryX streams the layer again, each system runs the gradient pass (the
   mask's indices) and the delta pass (``W^T``), SwarmX sums the gradients up its tree (exact:
   ``int64``, or bf16's exact sums), and MemoryX converts them to float (dividing out the
   fixed-point scales, the loss scale and the batch size:
   :meth:`~host.memoryx.MemoryX.update_sums`) and updates the layer with its optimizer.

The datapath format is ``int16`` or ``bf16`` (``format``; :mod:`host.numbers` holds what differs).

Each layer is quantised once per step (MemoryX keeps the stream until the layer
changes); the forward and backward passes broadcast the same stream.

Data: scikit-learn's bundled digits (8x8 pixels, 10 classes), pixels scaled to ``[0, 1]``, a
fixed 80/20 split; batches drawn in a seeded order per epoch. Everything that decides the bits
(initial weights, masks, batch order, integer gradients) is independent of how many systems
there are, so the final ``weights_digest`` is too, in ``int16``. In ``bf16`` each system's
weight gradients are binary32 sums on its mesh over its own tokens, rounded as they go, so the
digest depends on the number of systems (deterministic for each; ``docs/host.md``, "bf16").
"""

import math
import time
from dataclasses import asdict, dataclass

import numpy as np

from wse.fabric.config import train_config
from wse.rtl.numfmt import number_format
from wse.rtl.validate import count, integer, number

from .memoryx import LayerSpec, MemoryX
from .numbers import FORMATS, format_name, quantise, to_float
from .optim import make_optimizer
from .sparsity import KINDS, SparsitySchedule
from .swarmx import TRANSPORTS, SwarmX
from .train_record import (
    BY_PASS,
    DATA_SETTINGS,
    FIGURES,
    PASSES,
    STEP_TOTALS,
    check_run,
    step_record,
)

__all__ = ["TrainSettings", "Trainer", "load_digits_split", "TRAIN_SAMPLES", "DATA_SETTINGS"]

#: Digits' 1797 samples less the 20 % test split.
TRAIN_SAMPLES = 1438



def load_digits_split(seed=0, test_fraction=0.2):
    """``(x_train, y_train, x_test, y_test)``: digits, pixels in ``[0, 1]``, a seeded split."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float64)
    y = digits.target.astype(np.int64)
    order = np.random.default_rng([seed, 7]).permutation(len(y))
    n_test = int(round(test_fraction * len(y)))
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test]


@dataclass
class TrainSettings:
    """What ``wse train`` runs (``docs/host.md``); ``steps`` wins over ``epochs``."""
    mesh: tuple = (4, 4)
    systems: int = 1
    fanout: int = 2
    swarm: str = "inproc"
    address: str | None = None
    backend: str = "golden"
    format: str = "int16"
    hidden: tuple = (64,)
    sparsity: float = 0.9
    prune: str = "gradual"
    batch: int = 32
    epochs: int | None = 10
    steps: int | None = None
    optimizer: str = "adam"
    lr: float = 0.01
    weight_decay: float = 0.0
    loss_scale: int = 16
    seed: int = 0
    memory_bytes: int | None = None
    check_golden: bool = False

    def __post_init__(self):
        if self.swarm not in TRANSPORTS:
            raise ValueError(f"swarm must be one of {', '.join(TRANSPORTS)}, not {self.swarm!r}")
        if self.prune not in KINDS:
            raise ValueError(f"prune must be one of {', '.join(KINDS)}, not {self.prune!r}")
        name = self.format if isinstance(self.format, str) else format_name(self.format)
        if name not in FORMATS:
            raise ValueError(f"format must be one of {', '.join(FORMATS)}, not {self.format!r}")
        self.format = name
        for name in ("systems", "batch", "loss_scale"):
            setattr(self, name, count(name, getattr(self, name)))
        for name in ("steps", "epochs", "memory_bytes"):
            if getattr(self, name) is not None:
                setattr(self, name, count(name, getattr(self, name),
                                          minimum=0 if name == "memory_bytes" else 1))
        self.seed = integer("seed", self.seed, 0)
        self.sparsity = number("sparsity", self.sparsity, 0.0, 1.0, open_hi=True)
        if self.batch < self.systems:
            raise ValueError(f"batch ({self.batch}) must give every one of the {self.systems} "
                             f"systems at least one sample")
        if self.batch > TRAIN_SAMPLES:
            raise ValueError(f"batch ({self.batch}) must not exceed the {TRAIN_SAMPLES} "
                             f"training samples")
        if self.steps is None and self.epochs is None:
            raise ValueError("give epochs or steps")
        self.hidden = tuple(int(h) for h in self.hidden)
        if not self.hidden or min(self.hidden) < 1:
            raise ValueError(f"hidden must be one or more positive layer widths, not "
                             f"{self.hidden!r}")


class Trainer:
    """Trains a ``64-hidden...-10`` ReLU network on digits by weight streaming."""

    def __init__(self, settings, *, directory=None, resume=None):
        self.s = s = settings
        self.x_train, self.y_train, self.x_test, self.y_test = load_digits_split(s.seed)
        widths = (self.x_train.shape[1], *s.hidden, 10)
        specs = [LayerSpec(f"fc{j}", widths[j], widths[j + 1], sparse=j < len(s.hidden))
                 for j in range(len(widths) - 1)]
        self.sizing = train_config(s.mesh, widths, math.ceil(s.batch / s.systems),
                                   names=[spec.name for spec in specs],
                                   fmt=number_format(s.format))
        self.config = self.sizing.config
        self.fmt = self.config.fmt
        self.steps_per_epoch = len(self.y_train) // s.batch
        self.total_steps = s.steps if s.steps is not None else s.epochs * self.steps_per_epoch
        ramp_end = max(1, self.total_steps // 2)
        schedule = None if s.sparsity == 0 else SparsitySchedule(
            s.sparsity, kind=s.prune, start=0, end=ramp_end,
            every=max(1, ramp_end // 10), reselect_every=max(1, self.steps_per_epoch))
        optimizer = make_optimizer(s.optimizer, lr=s.lr, weight_decay=s.weight_decay)
        self.memoryx = MemoryX(specs, fmt=self.fmt, optimizer=optimizer, schedule=schedule,
                               memory_bytes=s.memory_bytes, directory=directory, seed=s.seed)
        self.step_index = 0
        self.history = []       # one dict per step
        self.evaluations = []   # {"step", "test_accuracy"}
        self._checks = [0, 0]   # mesh results checked before a resume, and by the workers since
        self.counts = {"gradient_overflows": 0, "mesh_overflows": 0, "mismatches": 0}
        self.train_seconds, self.steps_timed = 0.0, 0      # training steps only, this process
        # A checkpoint to resume is read and checked before any system starts (a simulator
        # build or a Ray cluster is long work to waste on a checkpoint that will be refused).
        run = self._load(resume) if resume is not None else None
        self.swarm = SwarmX(s.systems, fanout=s.fanout, transport=s.swarm, address=s.address,
                            worker={"config": self.config.to_dict(), "backend": s.backend,
                                    "check_golden": s.check_golden})
        if run is not None:
            self.swarm.link_bytes.update(run["link_bytes"])

    # -- one step -----------------------------------------------------------------------------

    def _batch(self, step):
        epoch, k = divmod(step, self.steps_per_epoch)
        order = np.random.default_rng([self.s.seed, 2, epoch]).permutation(len(self.y_train))
        return order[k * self.s.batch:(k + 1) * self.s.batch]

    def _shards(self, tokens):
        return np.array_split(np.arange(tokens), self.s.systems)

    def _forward(self, x, train):
        """Logits (float, ``[10, tokens]``) of ``x`` (``[tokens, 64]``) and the step's mesh
        cycles and dense cycles (the slowest system's)."""
        xq, _ = quantise(self.fmt, x.T)
        shards = self._shards(xq.shape[1])
        cycles = {}
        n = len(self.memoryx.layers)
        for j, spec in enumerate(self.memoryx.layers):
            stream = self.memoryx.stream(spec.name)
            requests = [None if not len(sh) else
                        {"op": "forward", "layer": j, "last": j == n - 1, "train": train,
                         "layout": self.sizing.layout}
                        | ({"x": xq[:, sh]} if j == 0 else {}) for sh in shards]
            replies = [r for r in self.swarm.broadcast(stream, requests) if r is not None]
            self._count(replies, cycles, train)
        logits = to_float(self.fmt, np.concatenate([r["y"] for r in replies], axis=1))
        if not np.isfinite(logits).all():
            raise RuntimeError(f"step {self.step_index}: {np.count_nonzero(~np.isfinite(logits))} "
                               f"logits are infinite or NaN (the {self.s.format} datapath "
                               f"overflowed; mesh overflows so far: "
                               f"{self.counts['mesh_overflows']}): the run diverged")
        return logits, cycles

    def _count(self, replies, cycles, train):
        """Add the replies' figures: ``cycles[pass]`` gathers, per system, a row of each of
        :data:`FIGURES` (cycles, dense cycles, ...); overflows (the gradient's apart) and golden
        checks are counted."""
        if train:
            for name in replies[0]["cycles"]:
                figures = cycles.setdefault(
                    name, np.zeros((len(FIGURES), self.s.systems), dtype=np.int64))
                figures[:, :len(replies)] += [[r[key][name] for r in replies] for key in FIGURES]
                key = "gradient_overflows" if name == "gradient" else "mesh_overflows"
                self.counts[key] += sum(r["overflow"][name] for r in replies)
        self._checks[1] = max(self._checks[1], sum(r["checks"] for r in replies))
        self.counts["mismatches"] += sum(r["mismatches"] for r in replies)

    @property
    def golden_checks(self):
        """Mesh results compared with the golden model so far (``check_golden``)."""
        return sum(self._checks)


    def step(self):
        """Train one batch; returns the step's record (loss, accuracy, cycles)."""
        s = self.s
        start = time.perf_counter()
        step = self.step_index
        self.memoryx.induce(step)
        idx = self._batch(step)
        logits, cycles = self._forward(self.x_train[idx], train=True)
        labels = self.y_train[idx]
        z = logits - logits.max(axis=0)
        p = np.exp(z) / np.exp(z).sum(axis=0)
        loss = float(-np.log(np.maximum(p[labels, np.arange(len(idx))], 1e-12)).mean())
        accuracy = float((logits.argmax(axis=0) == labels).mean())
        dlogits = p.copy()
        dlogits[labels, np.arange(len(idx))] -= 1.0
        dy, _ = quantise(self.fmt, dlogits * s.loss_scale)
        self.backward(dy, cycles, batch=len(idx))
        self.step_index += 1
        self.train_seconds += time.perf_counter() - start
        self.steps_timed += 1
        record = step_record(step, loss, accuracy, cycles)
        self.history.append(record)
        return record

    def backward(self, dy, cycles, *, batch):
        """The backward half of a step whose forward pass (``_forward(x, train=True)``) ran
        last: ``dy``, the loss gradient of the logits times ``loss_scale`` in the datapath
        format (``[classes, tokens]``), down every layer on the mesh; SwarmX's sums; MemoryX's
        update, of a loss summed over ``batch`` samples (:meth:`MemoryX.update_sums`).
        ``cycles`` gathers the passes' figures, as ``_forward``'s do."""
        shards = self._shards(dy.shape[1])
        sums = {}
        layers = self.memoryx.layers
        for j in reversed(range(len(layers))):
            name = layers[j].name
            requests = [{"op": "backward", "layer": j, "layout": self.sizing.layout}
                        | ({"dy": dy[:, sh]} if j == len(layers) - 1 else {}) for sh in shards]
            replies = self.swarm.broadcast(self.memoryx.stream(name), requests)
            self._count(replies, cycles, train=True)
            total = self.swarm.reduce([{"dW": r["dW"], "db": r["db"]} for r in replies])
            sums[name] = total["dW"], total["db"]
        self.memoryx.update_sums(sums, loss_scale=self.s.loss_scale, batch=batch)

    # -- evaluation and the whole run ---------------------------------------------------------

    def evaluate(self, x=None, y=None):
        """Accuracy on the test set (or ``x``, ``y``), through the mesh's forward pass."""
        x = self.x_test if x is None else x
        y = self.y_test if y is None else y
        chunk = self.s.systems * self.config.max_tokens
        correct = 0
        for a in range(0, len(y), chunk):
            logits, _ = self._forward(x[a:a + chunk], train=False)
            correct += int((logits.argmax(axis=0) == y[a:a + chunk]).sum())
        return correct / len(y)

    def run(self, on_step=None, on_epoch=None):
        """Train to :attr:`total_steps`, evaluating at every epoch's end and at the end; returns
        :meth:`report`."""
        start = time.monotonic()
        while self.step_index < self.total_steps:
            record = self.step()
            if on_step is not None:
                on_step(record)
            if self.step_index % self.steps_per_epoch == 0 or \
                    self.step_index == self.total_steps:
                acc = self.evaluate()
                self.evaluations.append({"step": self.step_index, "test_accuracy": acc})
                if on_epoch is not None:
                    on_epoch(self.step_index, acc)
        self.seconds = time.monotonic() - start
        return self.report()

    def report(self):
        """The run's figures, a JSON-able dict (``wse train --json``)."""
        sparse = [spec.name for spec in self.memoryx.layers if spec.sparse]
        masks = [self.memoryx.store.get(n)["mask"] for n in sparse]
        outside = sum(int(m.size - np.count_nonzero(m)) for m in masks)
        run = {key: sum(r.get(key, 0) for r in self.history) for key in STEP_TOTALS}
        mesh, dense = run["mesh_cycles"], run["dense_cycles"]
        by_pass = {key: {name: sum(r.get(key, {}).get(name, 0) for r in self.history)
                         for name in PASSES}
                   for key in BY_PASS}
        last = self.history[-1] if self.history else {}
        return {
            "test_accuracy": self.evaluations[-1]["test_accuracy"] if self.evaluations else None,
            "weight_sparsity": outside / sum(m.size for m in masks) if masks else 0.0,
            "layer_sparsity": {spec.name: self.memoryx.sparsity(spec.name)
                               for spec in self.memoryx.layers},
            "steps": self.step_index, "epochs": self.step_index / self.steps_per_epoch,
            "systems": self.s.systems, "backend": self.s.backend, "swarm": self.s.swarm,
            "format": self.s.format,
            "mesh": f"{self.config.rows}x{self.config.cols}",
            "model": "-".join(str(w) for w in (64, *self.s.hidden, 10)),
            **run,
            "speedup_vs_dense": dense / mesh if mesh else None,
            "ideal_speedup": (run["dense_macs"] / run["useful_macs"] if run["useful_macs"]
                              else None),
            **by_pass,
            "speedup_by_pass": {name: (by_pass["dense_cycles_by_pass"][name]
                                       / by_pass["cycles_by_pass"][name]
                                       if by_pass["cycles_by_pass"][name] else None)
                                for name in PASSES},
            "cycles_source": "rtl" if self.s.backend != "golden" else "cycle model",
            "gradient_source": "mesh",
            "weights_digest": self.memoryx.digest(),
            "final_loss": last.get("loss"), "train_accuracy": last.get("accuracy"),
            "golden_checks": self.golden_checks, "checked_results": self.golden_checks,
            **self.counts,
            "model_bytes": self.memoryx.model_bytes(),
            "model_bytes_int16": sum(2 * s.n_in * s.n_out for s in self.memoryx.layers),
            "mesh_sram_bytes": self.config.sram_bytes,
            "core": {name: getattr(self.config, name) for name in ("n_feat", "n_out", "n_tok")},
            "blocked_layers": dict(self.sizing.blocked),
            "resident_layers": bool(self.sizing.layout),
            "resident_why_not": self.sizing.why_not or None,
            "swarmx": self.swarm.stats(), "memoryx": self.memoryx.store.stats(),
            "settings": asdict(self.s),
            "seconds": round(getattr(self, "seconds", 0.0), 2),
            "seconds_per_step": (round(self.train_seconds / self.steps_timed, 5)
                                 if self.steps_timed else None),
            "history": self.history, "evaluations": self.evaluations,
        }

    # -- checkpoints --------------------------------------------------------------------------

    def save(self, path):
        """Checkpoint MemoryX and the run's position (atomic); returns the digest."""
        return self.memoryx.save(path, extra={
            "step": self.step_index, "history": self.history, "evaluations": self.evaluations,
            "counts": self.counts, "golden_checks": self.golden_checks,
            "link_bytes": self.swarm.link_bytes,
            "data": {name: getattr(self.s, name) for name in DATA_SETTINGS}})

    def resume(self, path):
        """Continue from a checkpoint of the same model and data settings (:data:`DATA_SETTINGS`);
        the next step is the one after it. Anything wrong in it raises :class:`CheckpointError`
        naming the field before anything here or in MemoryX changes. (``Trainer(settings,
        resume=path)`` does the same before its systems start.)"""
        run = self._load(path)
        self.swarm.link_bytes.update(run["link_bytes"])

    def _load(self, path):
        """MemoryX's state and this trainer's counts from the checkpoint ``path``, checked
        first; returns the checkpoint's run fields (SwarmX's ``link_bytes`` among them)."""
        run = self.memoryx.load(path, check=lambda extra, t: check_run(
            path, extra, t, total_steps=self.total_steps, counts=self.counts, settings=self.s))
        self.step_index = run["step"]
        self.history = run["history"]
        self.evaluations = run["evaluations"]
        self.counts.update(run["counts"])
        self._checks = [run["golden_checks"], 0]    # the figures go on from there
        return run

    def close(self):
        self.swarm.close()
        self.memoryx.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
