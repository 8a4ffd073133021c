"""MemoryX's optimizers: SGD (momentum, dampening, Nesterov, weight decay), Adam and AdamW.

Each follows the update rule ``torch.optim`` documents (``torch.optim.SGD``, ``Adam``,
``AdamW``), in float32, element by element, and only where a mask allows: a weight outside the
mask, and its optimizer state, are never touched. The state lives in plain named ``float32``
arrays the caller owns (:meth:`Optimizer.state_shapes`), so MemoryX can keep it in either tier and
checkpoint it without pickling anything.

Per step ``t`` (1-based) with gradient ``g`` and parameters ``p``:

- **SGD**: ``g += wd * p``; with momentum, ``b = g`` at ``t = 1`` else
  ``b = mu * b + (1 - dampening) * g``; ``g = g + mu * b`` (Nesterov) or ``g = b``;
  ``p -= lr * g``.
- **Adam**: ``g += wd * p``; ``m = b1 * m + (1 - b1) * g``; ``v = b2 * v + (1 - b2) * g**2``;
  ``p -= lr / (1 - b1**t) * m / (sqrt(v) / sqrt(1 - b2**t) + eps)``.
- **AdamW**: ``p *= 1 - lr * wd`` first, then Adam without the ``wd * p`` term.
"""

import math

import numpy as np

from wse.rtl.validate import number

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "OPTIMIZERS", "make_optimizer"]


class Optimizer:
    """An update rule over float32 arrays; subclasses give :attr:`name`, the state arrays and
    :meth:`_update`."""

    name = None
    state_names = ()
    #: State that is never negative (a checkpoint holding a negative value is refused).
    nonnegative_state = ()

    def __init__(self, lr):
        self.lr = number("lr", lr, 0.0)

    def hyper(self):
        """The hyperparameters, a JSON-able dict (checkpoints record it)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in vars(self).items()
                if k != "state_names"}

    def state_shapes(self, shape):
        """``{name: shape}`` of the state one parameter of ``shape`` needs."""
        return {name: shape for name in self.state_names}

    def step(self, param, grad, state, t, mask=None):
        """Update ``param`` (float32, in place) by ``grad`` at step ``t`` (1-based), with
        ``state`` (``{name: float32 array}``, in place); only where ``mask`` is true."""
        if t < 1:
            raise ValueError(f"t must be a step number from 1, not {t!r}")
        grad = np.asarray(grad, dtype=np.float32)
        if grad.shape != param.shape:
            raise ValueError(f"gradient shape {grad.shape} does not match parameter shape "
                             f"{param.shape}")
        if mask is None:
            p = param.astype(np.float32, copy=True)
            s = {k: v.astype(np.float32, copy=True) for k, v in state.items()}
            self._update(p, grad, s, t)
            param[...] = p
            for k, v in s.items():
                state[k][...] = v
            return
        mask = np.asarray(mask, dtype=bool)
        p = np.asarray(param[mask], dtype=np.float32)
        s = {k: np.asarray(v[mask], dtype=np.float32) for k, v in state.items()}
        self._update(p, grad[mask], s, t)
        param[mask] = p
        for k, v in s.items():
            state[k][mask] = v

    def _update(self, p, g, s, t):
        raise NotImplementedError


class SGD(Optimizer):
    """``torch.optim.SGD``: ``lr``, ``momentum``, ``dampening``, ``weight_decay``,
    ``nesterov``."""

    name = "sgd"

    def __init__(self, lr=0.1, *, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False):
        super().__init__(lr)
        self.momentum = number("momentum", momentum, 0.0)
        self.dampening = number("dampening", dampening, 0.0, 1.0)
        self.weight_decay = number("weight_decay", weight_decay, 0.0)
        self.nesterov = bool(nesterov)
        if self.nesterov and (self.momentum == 0 or self.dampening != 0):
            raise ValueError("nesterov needs a momentum above 0 and a dampening of 0")
        self.state_names = ("momentum_buffer",) if self.momentum else ()

    def _update(self, p, g, s, t):
        f32 = np.float32
        if self.weight_decay:
            g = g + f32(self.weight_decay) * p
        if self.momentum:
            b = s["momentum_buffer"]
            if t == 1:
                b[...] = g
            else:
                b[...] = f32(self.momentum) * b + f32(1 - self.dampening) * g
            g = g + f32(self.momentum) * b if self.nesterov else b
        p -= f32(self.lr) * g


class Adam(Optimizer):
    """``torch.optim.Adam``: ``lr``, ``betas``, ``eps``, ``weight_decay`` (L2, added to the
    gradient)."""

    name = "adam"
    state_names = ("exp_avg", "exp_avg_sq")
    nonnegative_state = ("exp_avg_sq",)
    decoupled = False

    def __init__(self, lr=1e-3, *, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        super().__init__(lr)
        b1, b2 = betas
        self.betas = (number("betas[0]", b1, 0.0, 1.0, open_hi=True),
                      number("betas[1]", b2, 0.0, 1.0, open_hi=True))
        self.eps = number("eps", eps, 0.0)
        self.weight_decay = number("weight_decay", weight_decay, 0.0)

    def _update(self, p, g, s, t):
        f32 = np.float32
        b1, b2 = self.betas
        if self.weight_decay:
            if self.decoupled:
                p *= f32(1 - self.lr * self.weight_decay)
            else:
                g = g + f32(self.weight_decay) * p
        m, v = s["exp_avg"], s["exp_avg_sq"]
        m[...] = f32(b1) * m + f32(1 - b1) * g
        v[...] = f32(b2) * v + f32(1 - b2) * g * g
        step_size = f32(self.lr / (1 - b1 ** t))
        denom = np.sqrt(v) / f32(math.sqrt(1 - b2 ** t)) + f32(self.eps)
        p -= step_size * (m / denom)


class AdamW(Adam):
    """``torch.optim.AdamW``: Adam with decoupled weight decay (default 0.01)."""

    name = "adamw"
    decoupled = True

    def __init__(self, lr=1e-3, *, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
        super().__init__(lr, betas=betas, eps=eps, weight_decay=weight_decay)


#: The optimizers by name: what :func:`make_optimizer` dispatches on, and the choices of
#: ``wse train --optimizer``.
OPTIMIZERS = {cls.name: cls for cls in (SGD, Adam, AdamW)}


def make_optimizer(name, **hyper):
    """An optimizer by name (a key of :data:`OPTIMIZERS`) with its hyperparameters."""
    if name not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, not {name!r}")
    if "betas" in hyper:
        hyper["betas"] = tuple(hyper["betas"])
    try:
        return OPTIMIZERS[name](**hyper)
    except TypeError as error:
        raise ValueError(f"{name}: {error}") from None
