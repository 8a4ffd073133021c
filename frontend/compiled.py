"""``compile`` and ``trace``: a module and a training step, run by weight streaming
(``docs/torch.md``).

Inside a function decorated with :func:`trace`, the user's step runs as written:

1. ``compiled(x)`` runs the forward pass on the mesh (:meth:`MeshEngine.forward`) and returns
   the logits as a leaf tensor that requires a gradient: nothing of the model runs in torch;
2. ``loss_fn(logits, y)`` and ``loss.backward()`` run in torch on the host, on the logits
   alone: that is the loss and its gradient with respect to the logits, which ``wse train``
   computes on the host too. The gradient must be softmax cross-entropy's (averaged or summed
   over the batch), checked from its values: ``p - onehot`` for the softmax ``p`` of the
   logits;
3. ``optimizer.step()`` (a torch optimizer step hook) runs the backward passes on the mesh and
   MemoryX's update (:meth:`MeshEngine.backward_step`), then writes the trained masters into the
   module's parameters; torch's own step has no gradient to apply (the parameters' ``.grad``
   stay ``None``).

Outside a trace, ``compiled(x)`` is the mesh's forward pass alone (evaluation). Parameters the
user changes between steps (``load_state_dict``) are sent to MemoryX before the next pass.
"""

import contextvars
import functools

import numpy as np
import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from .backend import Backend
from .engine import MeshEngine, shard_of
from .graph import UnsupportedError, read_model
from .optim import hyperparameters, optimizers_of, read_optimizer
from .sparse import CpuMasks, config_of

__all__ = ["compile", "trace", "CompiledModel"]

_TRACE = contextvars.ContextVar("wse_torch_trace", default=None)


def compile(model, backend):
    """``model`` (a ``torch.nn.Module``: a chain of ``Linear`` and ReLU) ready to train on
    ``backend`` (:func:`~wse.torch.backend`); refuses, in one line naming the module path and
    type, anything that does not map. The systems start at the first step."""
    if not isinstance(backend, Backend):
        raise UnsupportedError(f"backend must be made by wse.torch.backend(), not "
                               f"{type(backend).__name__}")
    return CompiledModel(model, backend)


class CompiledModel:
    """A module compiled for a backend; call it as the module (``compiled(x)``)."""

    def __init__(self, model, backend):
        self.model = model
        self.backend = backend
        self.layers = read_model(model)
        self.engine = None
        self.optimizer = None
        self.cpu_masks = None
        self._hyper = None
        self._versions = None
        self._step = None           # (logits leaf, float64 logits) of the traced forward

    @property
    def parameters(self):
        return list(self.model.parameters())

    def __call__(self, x):
        state = _TRACE.get()
        if self.backend.is_cpu:
            if state is not None and self not in state.models:
                state.models.append(self)
                self._cpu_begin()
            return self.model(x)
        x = self._inputs(x)
        if state is None:
            if self.engine is None:
                self._start(len(x), training=False)
            self._sync_in()
            logits = self.engine.predict(x)
            return torch.from_numpy(logits.T.astype(np.float32))
        if self in state.models:
            raise UnsupportedError("the compiled model ran twice in one traced step: a step is "
                                   "one forward pass, one loss.backward() and one "
                                   "optimizer.step()")
        state.models.append(self)
        if len(x) < self.backend.systems:
            raise UnsupportedError(f"a batch of {len(x)} cannot give each of the "
                                   f"{self.backend.systems} systems a sample (drop_last=True "
                                   f"in the DataLoader)")
        if self.engine is not None and self.optimizer is None:
            self.close()            # started for evaluation alone: start again to train
        if self.engine is None:
            self._start(len(x), training=True)
        self._sync_in()
        self._check_optimizer()
        logits = self.engine.forward(x)
        leaf = torch.from_numpy(logits.T.astype(np.float32)).requires_grad_(True)
        self._step = leaf, logits
        return leaf

    def _inputs(self, x):
        x = torch.as_tensor(x).detach()
        if x.dim() != 2:
            x = x.reshape(len(x), -1)
        n_in = self.layers[0].module.in_features
        if x.shape[1] != n_in:
            raise UnsupportedError(f"the input has {x.shape[1]} features, the model's first "
                                   f"Linear ({self.layers[0].path}) takes {n_in}")
        return x.to(torch.float64).numpy()

    # -- the systems --------------------------------------------------------------------------

    def _start(self, batch, *, training):
        """MemoryX, SwarmX and the systems, from the module, its optimizer and its sparsity
        (for evaluation alone, without an optimizer, and the masks the schedule has not drawn
        yet: every weight the module holds)."""
        found = optimizers_of(self.parameters)
        if not training and not found:
            self.engine = MeshEngine(self.backend, self.layers, optimizer=None, schedule=None,
                                     sparse=[], shard=shard_of(batch, self.backend.systems))
            self._versions = None
            return
        if len(found) != 1:
            raise UnsupportedError(
                "no wse.torch.optim optimizer holds the model's parameters: make one "
                "(wse.torch.optim.Adam(model.parameters(), ...), a drop-in for torch.optim's) "
                "before the first step" if not found else
                f"{len(found)} wse.torch.optim optimizers hold the model's parameters; "
                f"MemoryX takes one")
        self.optimizer = found[0]
        optimizer = read_optimizer(self.optimizer, self.parameters)
        self._hyper = hyperparameters(self.optimizer)
        config = config_of(self.model)
        schedule, sparse = None, []
        if config is not None:
            sparse = config.sparse_layers(self.model.named_parameters(), self.layers)
            schedule = config.schedule(self.backend.total_steps, self.backend.steps_per_epoch)
        try:
            self.engine = MeshEngine(self.backend, self.layers, optimizer=optimizer,
                                     schedule=schedule, sparse=sparse,
                                     shard=shard_of(batch, self.backend.systems))
        except ValueError as error:
            raise UnsupportedError(str(error)) from None
        self._versions = None       # every layer goes to MemoryX now

    def _sync_in(self):
        """Parameters changed in the module since MemoryX last wrote them go to MemoryX."""
        versions = [p._version for p in self.parameters]
        if versions == self._versions:
            return
        with torch.no_grad():
            for layer in self.layers:
                m = layer.module
                try:
                    self.engine.assign(layer.name, m.weight.detach().numpy(),
                                       None if m.bias is None else m.bias.detach().numpy())
                except ValueError as error:
                    raise UnsupportedError(f"{layer.path}: {error}") from None
        self._versions = [p._version for p in self.parameters]

    def _sync_out(self):
        """MemoryX's masters into the module's parameters."""
        with torch.no_grad():
            for layer in self.layers:
                W, b = self.engine.weights(layer.name)
                layer.module.weight.copy_(torch.from_numpy(W))
                if b is not None:
                    layer.module.bias.copy_(torch.from_numpy(b))
        self._versions = [p._version for p in self.parameters]

    def _check_optimizer(self):
        """The learning rate is read at every step (a scheduler may change it); another
        hyperparameter changed since the first step is refused."""
        name, hyper = hyperparameters(self.optimizer)
        first_name, first = self._hyper
        changed = sorted(k for k in hyper if k != "lr" and hyper[k] != first[k])
        if name != first_name or changed:
            raise UnsupportedError(f"{type(self.optimizer).__qualname__}: "
                                   f"{changed[0] if changed else 'its rule'} changed during "
                                   f"training; only lr may change between steps")
        self.engine.memoryx.optimizer.lr = float(hyper["lr"])

    # -- the step's end -----------------------------------------------------------------------

    def optimizer_step(self, optimizer):
        """The mesh's backward passes and MemoryX's update, for ``optimizer.step()``."""
        if self._step is None:
            raise UnsupportedError("optimizer.step() before the compiled model's forward pass "
                                   "in this traced step")
        leaf, logits = self._step
        self._step = None
        if optimizer is not self.optimizer:
            raise UnsupportedError(f"{type(optimizer).__qualname__} is not the optimizer the "
                                   f"compiled model trains with")
        if leaf.grad is None:
            raise UnsupportedError("optimizer.step() before loss.backward() reached the "
                                   "compiled model's output")
        dlogits, labels, factor = _cross_entropy_gradient(logits, leaf.grad)
        batch = logits.shape[1]
        p = np.exp(logits - logits.max(axis=0))
        p /= p.sum(axis=0)
        loss = float(-np.log(np.maximum(p[labels, np.arange(batch)], 1e-12)).mean())
        accuracy = float((logits.argmax(axis=0) == labels).mean())
        self.engine.backward_step(dlogits, batch=factor, loss=loss, accuracy=accuracy)
        for p in self.parameters:
            p.grad = None           # the mesh's gradient is applied; torch's step has none
        self._sync_out()

    def _cpu_begin(self):
        """On the cpu backend: the sparsity schedule's step on the module's own weights."""
        if self.cpu_masks is None:
            config = config_of(self.model)
            if config is None:
                return
            sparse = config.sparse_layers(self.model.named_parameters(), self.layers)
            schedule = config.schedule(self.backend.total_steps, self.backend.steps_per_epoch)
            by_name = {layer.name: layer.module.weight for layer in self.layers}
            self.cpu_masks = CpuMasks(schedule, {n: by_name[n] for n in sparse},
                                      self.backend.seed)
            self.cpu_step = 0
        self.cpu_masks.induce(self.cpu_step, self.optimizer or _NoOptimizer)
        self.cpu_step += 1

    def close(self):
        """Stop the systems (the module keeps its trained parameters)."""
        if self.engine is not None:
            self.engine.close()
            self.engine = None

    def summary(self):
        """The run's figures (:meth:`MeshEngine.summary`); ``{}`` before the first step or on
        the cpu backend."""
        return {} if self.engine is None else self.engine.summary()


class _NoOptimizer:
    state = {}


def _cross_entropy_gradient(logits, grad):
    """``(dlogits, labels, factor)`` from the gradient torch computed for the logits leaf:
    softmax cross-entropy's is ``(p - onehot) / factor`` with ``factor`` the batch (mean) or 1
    (sum). Recomputed in ``float64`` from the labels, as ``wse train`` computes it; any other
    gradient is refused."""
    batch = logits.shape[1]
    p = np.exp(logits - logits.max(axis=0))
    p /= p.sum(axis=0)
    g = grad.detach().to(torch.float64).numpy().T
    for factor in dict.fromkeys((batch, 1)):
        onehot = p - g * factor
        rounded = np.rint(onehot)
        if (np.abs(onehot - rounded).max() < 1e-3 and set(np.unique(rounded)) <= {0.0, 1.0}
                and (rounded.sum(axis=0) == 1).all()):
            labels = rounded.argmax(axis=0)
            return p - rounded, labels, factor
    raise UnsupportedError("the loss is not the softmax cross-entropy of the compiled model's "
                           "output (nn.CrossEntropyLoss or F.cross_entropy, reduction 'mean' or "
                           "'sum', no class weights, label smoothing or ignored samples): the "
                           "mesh trains that loss only")


class _TraceState:
    def __init__(self):
        self.models = []


def _pre_step(optimizer, args, kwargs):
    state = _TRACE.get()
    if state is None:
        return
    for model in state.models:
        if model.backend.is_cpu:
            if model.cpu_masks is not None and any(
                    p is q for g in optimizer.param_groups for p in g["params"]
                    for q in model.parameters):
                model.optimizer = optimizer
                model.cpu_masks.mask_gradients()
            continue
        mine = {id(p) for p in model.parameters}
        if any(id(p) in mine for g in optimizer.param_groups for p in g["params"]):
            if args[1:] or kwargs.get("closure") is not None:     # args[0]: the optimizer
                raise UnsupportedError("optimizer.step(closure) re-evaluates the model in "
                                       "torch: call step() without a closure")
            model.optimizer_step(optimizer)


def trace(step):
    """Decorate a training step (``loss = loss_fn(compiled(x), y); loss.backward();
    optimizer.step(); optimizer.zero_grad(); return loss``) so that it runs on the compiled
    models' backends; the step returns what it returns."""
    @functools.wraps(step)
    def traced(*args, **kwargs):
        state = _TraceState()
        token = _TRACE.set(state)
        pre = register_optimizer_step_pre_hook(_pre_step)
        try:
            result = step(*args, **kwargs)
        finally:
            pre.remove()
            _TRACE.reset(token)
        for model in state.models:
            if model._step is not None:
                model._step = None
                raise UnsupportedError("the traced step ran the compiled model but called no "
                                       "optimizer.step(): a step is one forward pass, one "
                                       "loss.backward() and one optimizer.step()")
        return result
    return traced

