"""The mesh side of a compiled model: :class:`MeshEngine`, ``wse train``'s trainer over a
model read from PyTorch (``docs/torch.md``, "What runs where").

It is a :class:`wse.host.train.Trainer` whose layers, initial weights, optimizer and sparsity
come from the module, the optimizer and the config instead of ``wse train``'s options, and whose
batches come from the caller: the forward pass (:meth:`forward`) and the backward passes with
MemoryX's update (:meth:`backward_step`) are the trainer's own, so a step runs exactly as
``wse train`` runs one: MemoryX streams every layer, SwarmX broadcasts it to the systems and
sums their gradients, and the three passes run on the backend's meshes.
"""

import math
import time

import numpy as np

from wse.fabric.config import train_config
from wse.host.memoryx import LayerSpec, MemoryX
from wse.host.numbers import quantise
from wse.host.swarmx import SwarmX
from wse.host.train import Trainer, TrainSettings
from wse.host.train_record import STEP_TOTALS, step_record
from wse.rtl.numfmt import number_format

__all__ = ["MeshEngine"]


class MeshEngine(Trainer):
    """Weight-streaming training of ``layers`` (:class:`~wse.torch.graph.LinearLayer`) on
    ``backend``'s meshes. ``sparse``: the names of the layers the ``schedule`` prunes;
    ``shard``: the tokens a system gets of a batch (the cores are sized for it)."""

    def __init__(self, backend, layers, *, optimizer, schedule, sparse, shard):
        widths = [layers[0].module.in_features] + [layer.module.out_features
                                                   for layer in layers]
        # The trainer's settings as far as its forward and backward passes read them (the
        # digits data, epochs and batch are the caller's here).
        self.s = TrainSettings(mesh=backend.mesh, systems=backend.systems,
                               fanout=backend.fanout, swarm=backend.swarm,
                               backend=backend.name, format=backend.format,
                               hidden=tuple(widths[1:-1]) or (widths[-1],),
                               sparsity=schedule.final if schedule else 0.0,
                               batch=backend.systems, steps=1, loss_scale=backend.loss_scale,
                               seed=backend.seed, check_golden=backend.check_golden)
        specs = [LayerSpec(layer.name, layer.module.in_features, layer.module.out_features,
                           sparse=layer.name in sparse) for layer in layers]
        self.sizing = train_config(self.s.mesh, widths, shard, names=[s.name for s in specs],
                                   fmt=number_format(self.s.format))
        self.config = self.sizing.config
        self.fmt = self.config.fmt
        self.memoryx = MemoryX(specs, fmt=self.fmt, optimizer=optimizer, schedule=schedule,
                               seed=self.s.seed)
        self.biases = {layer.name: layer.bias for layer in layers}
        self.step_index = 0
        self.history = []
        self.evaluations = []
        self._checks = [0, 0]
        self.counts = {"gradient_overflows": 0, "mesh_overflows": 0, "mismatches": 0}
        self.train_seconds, self.steps_timed = 0.0, 0
        self._pending = None
        self.swarm = SwarmX(self.s.systems, fanout=self.s.fanout, transport=self.s.swarm,
                            worker={"config": self.config.to_dict(), "backend": self.s.backend,
                                    "check_golden": self.s.check_golden})

    def assign(self, name, W, b):
        """Layer ``name``'s masters from the module (``b`` None: a Linear without bias, kept 0)."""
        self.memoryx.assign(name, W, np.zeros(W.shape[0], np.float32) if b is None else b)

    def weights(self, name):
        """``(W, b)`` of layer ``name`` as float32 arrays (``b`` None without bias)."""
        W, b = self.memoryx.weights(name)
        return W, (b if self.biases[name] else None)

    def forward(self, x):
        """The training forward pass of ``x`` (``[tokens, n_in]`` floats) after the sparsity
        schedule's step; the logits, ``float64 [classes, tokens]``."""
        start = time.perf_counter()
        self.memoryx.induce(self.step_index)
        logits, cycles = self._forward(x, train=True)
        self._pending = cycles, time.perf_counter() - start
        return logits

    def backward_step(self, dlogits, *, batch, loss, accuracy):
        """The rest of the step the last :meth:`forward` began: ``dlogits``, the gradient of
        the loss (summed over ``batch`` samples) with respect to the logits, ``float64
        [classes, tokens]``, quantised with the loss scale and run down the layers; MemoryX's
        update; biases of layers without one kept 0. Returns the step's record."""
        if self._pending is None:
            raise RuntimeError("a backward pass without its forward pass")
        cycles, seconds = self._pending
        self._pending = None
        start = time.perf_counter()
        dy, _ = quantise(self.fmt, dlogits * self.s.loss_scale)
        self.backward(dy, cycles, batch=batch)
        for name, has_bias in self.biases.items():
            if not has_bias:
                W, _ = self.memoryx.weights(name)
                self.memoryx.assign(name, W, np.zeros(W.shape[0], np.float32))
        record = step_record(self.step_index, loss, accuracy, cycles)
        self.step_index += 1
        self.train_seconds += seconds + time.perf_counter() - start
        self.steps_timed += 1
        self.history.append(record)
        return record

    def predict(self, x):
        """Logits (``float64 [classes, tokens]``) of ``x`` through the mesh's forward pass,
        in chunks the systems hold."""
        chunk = self.s.systems * self.config.max_tokens
        return np.concatenate([self._forward(x[a:a + chunk], train=False)[0]
                               for a in range(0, len(x), chunk)], axis=1)

    def summary(self):
        """The run's figures so far, a JSON-able dict (a subset of ``wse train --json``'s)."""
        run = {key: sum(r.get(key, 0) for r in self.history) for key in STEP_TOTALS}
        sparse = [s.name for s in self.memoryx.layers if s.sparse]
        masks = [self.memoryx.store.get(n)["mask"] for n in sparse]
        outside = sum(int(m.size - np.count_nonzero(m)) for m in masks)
        return {
            "steps": self.step_index, "backend": self.s.backend, "systems": self.s.systems,
            "mesh": f"{self.config.rows}x{self.config.cols}", "format": self.s.format,
            "model": "-".join(str(w) for w in [self.memoryx.layers[0].n_in]
                              + [s.n_out for s in self.memoryx.layers]),
            "weight_sparsity": outside / sum(m.size for m in masks) if masks else 0.0,
            **run,
            "speedup_vs_dense": (run["dense_cycles"] / run["mesh_cycles"]
                                 if run["mesh_cycles"] else None),
            "ideal_speedup": (run["dense_macs"] / run["useful_macs"] if run["useful_macs"]
                              else None),
            "cycles_source": "rtl" if self.s.backend != "golden" else "cycle model",
            "checked_results": self.golden_checks, **self.counts,
            "weights_digest": self.memoryx.digest(),
            "blocked_layers": dict(self.sizing.blocked),
            "seconds_per_step": (round(self.train_seconds / self.steps_timed, 5)
                                 if self.steps_timed else None),
        }


def shard_of(batch, systems):
    """The tokens the first system gets of a batch (the cores are sized for it)."""
    return max(1, math.ceil(batch / systems))
