"""Sparsity for ``wse.torch``: ``configure`` a config, ``model.apply`` it (``docs/torch.md``).

A config names an algorithm, the target sparsity and which weights it applies to:

- ``"static"``: a fixed random mask at the target from the first step (``wse train --prune
  random``);
- ``"gmp"``: gradual magnitude pruning on the cubic ramp of Zhu & Gupta from 0 at ``begin`` to
  the target at ``end``, pruning every ``frequency`` steps (``--prune gradual``);
- ``"set"``: the ramp, then every ``update_every`` steps the weakest ``drop_fraction`` of live
  weights dropped and as many regrown at random, from zero (``--prune dynamic``).

``param_filter`` is a glob (or a list of globs) over the model's parameter names
(``model.named_parameters()``), every Linear weight by default; a bias, or a name that is not a
Linear's weight, is refused. On the mesh, MemoryX applies the schedule
(:class:`wse.host.sparsity.SparsitySchedule`); on the ``cpu`` backend, :class:`CpuMasks` applies
the same schedule to the module's own tensors with the same functions and the same seeded
generator, so that a plain PyTorch run can be compared with the mesh's.
"""

import fnmatch
import weakref

import numpy as np
import torch

from wse.host.sparsity import SparsitySchedule, magnitude_mask, random_mask, reselect

from .graph import UnsupportedError

__all__ = ["configure", "SparsityConfig", "CpuMasks", "config_of"]

#: The algorithms by their ``cerebras.pytorch`` name, as :mod:`wse.host.sparsity` names them.
ALGORITHMS = {"static": "random", "gmp": "gradual", "set": "dynamic"}
_KEYS = {"algorithm", "sparsity", "param_filter", "begin", "end", "frequency", "update_every",
         "drop_fraction"}

#: Which config a module was given (``model.apply(config)``).
_APPLIED = weakref.WeakKeyDictionary()


def configure(config):
    """A :class:`SparsityConfig` from a dict (keys above), checked now: an unknown key or
    algorithm, or a sparsity outside ``[0, 1)``, is refused in one line."""
    if isinstance(config, SparsityConfig):
        return config
    if not isinstance(config, dict):
        raise UnsupportedError(f"a sparsity config must be a dict, not {type(config).__name__}")
    unknown = sorted(set(config) - _KEYS)
    if unknown:
        raise UnsupportedError(f"sparsity config: unknown key {unknown[0]!r} (the keys are "
                               f"{', '.join(sorted(_KEYS))})")
    return SparsityConfig(**config)


def config_of(model):
    """The :class:`SparsityConfig` ``model.apply`` was given, or None."""
    return _APPLIED.get(model)


class SparsityConfig:
    """One sparsity config; ``model.apply(config)`` attaches it to ``model``."""

    def __init__(self, algorithm, sparsity, param_filter="*.weight", *, begin=0, end=None,
                 frequency=None, update_every=None, drop_fraction=0.2):
        if algorithm not in ALGORITHMS:
            raise UnsupportedError(f"sparsity algorithm {algorithm!r} is not supported: use "
                                   f"{', '.join(map(repr, ALGORITHMS))}")
        try:
            self.sparsity = float(sparsity)
        except (TypeError, ValueError):
            raise UnsupportedError(f"sparsity must be a number in [0, 1), not "
                                   f"{sparsity!r}") from None
        if not 0 <= self.sparsity < 1:
            raise UnsupportedError(f"sparsity must be a number in [0, 1), not {sparsity!r}")
        self.algorithm = algorithm
        self.param_filter = [param_filter] if isinstance(param_filter, str) else \
            list(param_filter)
        self.begin, self.end, self.frequency = begin, end, frequency
        self.update_every, self.drop_fraction = update_every, drop_fraction

    def __call__(self, module):
        """``model.apply(config)``: ``apply`` calls this on every submodule, then the model."""
        _APPLIED[module] = self
        return module

    def sparse_layers(self, named_parameters, layers):
        """The names (:attr:`LinearLayer.name`) of the ``layers`` whose weight matches the
        filter; refuses a match that is not a Linear's weight, and a filter matching nothing."""
        weights = {f"{layer.path}.weight": layer for layer in layers}
        chosen = []
        for name, _ in named_parameters:
            if any(fnmatch.fnmatchcase(name, pattern) for pattern in self.param_filter):
                if name not in weights:
                    raise UnsupportedError(f"sparsity param_filter {self.param_filter} matches "
                                           f"{name!r}, which is not a Linear layer's weight")
                chosen.append(weights[name].name)
        if not chosen:
            raise UnsupportedError(f"sparsity param_filter {self.param_filter} matches no "
                                   f"parameter of the model")
        return chosen

    def schedule(self, total_steps=None, steps_per_epoch=None):
        """The :class:`~wse.host.sparsity.SparsitySchedule`, ``end`` by default half of
        ``total_steps`` (a :class:`~wse.torch.DataExecutor`'s ``num_steps``) and
        ``update_every`` an epoch (``steps_per_epoch``), as ``wse train`` has them."""
        kind = ALGORITHMS[self.algorithm]
        end = self.end
        if end is None and kind != "random":
            if total_steps is None:
                raise UnsupportedError(f"sparsity algorithm {self.algorithm!r} needs 'end' (the "
                                       f"step the ramp reaches {self.sparsity}) or a "
                                       f"DataExecutor with num_steps")
            end = max(1, total_steps // 2)
        end = 0 if end is None else end
        every = self.frequency or max(1, (end - self.begin) // 10)
        update_every = self.update_every or steps_per_epoch
        if kind == "dynamic" and update_every is None:
            raise UnsupportedError("sparsity algorithm 'set' needs 'update_every' or a "
                                   "DataExecutor over a loader with a length")
        try:
            return SparsitySchedule(self.sparsity, kind=kind, start=self.begin, end=end,
                                    every=every, reselect_every=update_every or 1,
                                    reselect_fraction=self.drop_fraction)
        except ValueError as error:
            raise UnsupportedError(f"sparsity config: {error}") from None


class CpuMasks:
    """The schedule applied to a module's own weights on the CPU, as MemoryX applies it: the
    same mask functions, the same generator (``[seed, 1]``), layers in the chain's order;
    pruned weights and their optimizer state zeroed, gradients masked before each step."""

    def __init__(self, schedule, params, seed):
        self.schedule = schedule
        self.params = params            # {layer name: weight Parameter}, in the chain's order
        self.masks = {name: np.ones(tuple(p.shape), dtype=bool) for name, p in params.items()}
        self.rng = np.random.default_rng([int(seed), 1])

    def induce(self, step, optimizer):
        s = self.schedule
        for name, param in self.params.items():
            W = param.detach().numpy()
            mask, grown = self.masks[name], None
            if s.kind == "random":
                if not mask.all():
                    continue
                new = random_mask(mask.shape, s.final, self.rng)
            elif s.prunes_at(step):
                new = magnitude_mask(W, s.target(step), within=mask)
            elif s.reselects_at(step):
                new, grown = reselect(W, mask, s.reselect_fraction, self.rng)
            else:
                continue
            if np.array_equal(new, mask):
                continue
            dead = torch.from_numpy(~new if grown is None else (~new | grown))
            with torch.no_grad():
                param[dead] = 0
                for value in optimizer.state.get(param, {}).values():
                    if isinstance(value, torch.Tensor) and value.shape == param.shape:
                        value[dead] = 0
            self.masks[name] = new

    def mask_gradients(self):
        for name, param in self.params.items():
            if param.grad is not None:
                param.grad[torch.from_numpy(~self.masks[name])] = 0

    def sparsity(self):
        total = sum(m.size for m in self.masks.values())
        return 1.0 - sum(int(np.count_nonzero(m)) for m in self.masks.values()) / total
