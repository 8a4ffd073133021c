"""A ``torch.optim`` optimizer read as MemoryX's (``docs/torch.md``, "Optimizers").

MemoryX's optimizers (:mod:`wse.host.optim`) follow ``torch.optim``'s update rules for ``SGD``,
``Adam`` and ``AdamW``; this module reads a user's optimizer object, checks that every option
it sets is one that rule honours, and gives the MemoryX optimizer with the same
hyperparameters. Refused, in one line naming the option: another optimizer class (a subclass
too: it may change the rule), ``amsgrad=True``, ``maximize=True``, parameter groups with
different hyperparameters, an optimizer that does not hold every parameter of the model, and a
closure passed to ``step()``. The drop-in classes here (:class:`SGD`, :class:`Adam`,
:class:`AdamW`) are ``torch.optim``'s own, checked when they are made and registered so that a
compiled model finds its optimizer before its first step. ``foreach``, ``fused``,
``capturable`` and ``differentiable`` choose how torch computes the same rule on its own
devices; MemoryX computes it once, so they are accepted and have no effect. The learning
rate is read again at every step, so a ``torch.optim.lr_scheduler`` works; any other
hyperparameter changed during training is refused.
"""

import weakref

import torch

from wse.host.optim import make_optimizer

from .graph import UnsupportedError, type_name

__all__ = ["SGD", "Adam", "AdamW", "read_optimizer", "hyperparameters", "optimizers_of"]

#: Options that choose torch's implementation, not the rule.
_IMPLEMENTATION = ("foreach", "fused", "capturable", "differentiable")
#: What each class's rule reads, by MemoryX's name of the rule.
_RULES = {
    torch.optim.SGD: ("sgd", ("lr", "momentum", "dampening", "weight_decay", "nesterov")),
    torch.optim.Adam: ("adam", ("lr", "betas", "eps", "weight_decay")),
    torch.optim.AdamW: ("adamw", ("lr", "betas", "eps", "weight_decay")),
}
#: Options whose only value MemoryX's rules honour.
_FIXED = {"amsgrad": False, "maximize": False}


#: The optimizers made through this module, which a compiled model looks for at its first step.
_MADE = weakref.WeakSet()


class _Registered:
    """``torch.optim``'s class, checked when it is made (what MemoryX cannot honour is refused
    before anything runs) and registered, so that a compiled model finds it at its first
    step."""

    def __init__(self, params, *args, **kwargs):
        super().__init__(params, *args, **kwargs)
        hyperparameters(self)
        _MADE.add(self)


class SGD(_Registered, torch.optim.SGD):
    """``torch.optim.SGD``, checked and registered (a drop-in replacement)."""


class Adam(_Registered, torch.optim.Adam):
    """``torch.optim.Adam``, checked and registered (a drop-in replacement)."""


class AdamW(_Registered, torch.optim.AdamW):
    """``torch.optim.AdamW``, checked and registered (a drop-in replacement)."""


def optimizers_of(parameters):
    """The optimizers made here that hold any of ``parameters``."""
    mine = {id(p) for p in parameters}
    return [o for o in list(_MADE)
            if any(id(p) in mine for g in o.param_groups for p in g["params"])]


def _base(optimizer):
    """The ``torch.optim`` class whose rule ``optimizer`` follows: its own, or for the classes
    above their base; another subclass is not trusted to keep the rule."""
    kind = type(optimizer)
    if issubclass(kind, _Registered):
        return kind.__mro__[2]
    return kind


def _value(value):
    if isinstance(value, torch.Tensor):
        return value.item() if value.numel() == 1 else tuple(v.item() for v in value)
    if isinstance(value, tuple | list):
        return tuple(_value(v) for v in value)
    return value


def hyperparameters(optimizer):
    """``(rule name, {hyperparameter: value})`` of a ``torch.optim`` optimizer, or
    :class:`UnsupportedError` naming what MemoryX cannot honour."""
    kind = _base(optimizer)
    if kind not in _RULES:
        raise UnsupportedError(f"optimizer {type_name(kind)} is not supported: use "
                               f"torch.optim.SGD, Adam or AdamW")
    name, keys = _RULES[kind]
    groups = optimizer.param_groups
    chosen = None
    for g, group in enumerate(groups):
        for option, only in _FIXED.items():
            if option in group and bool(group[option]) != only:
                raise UnsupportedError(f"{kind.__qualname__}({option}={group[option]!r}) is not "
                                       f"supported: MemoryX's {name} rule has {option}={only}")
        if group.get("decoupled_weight_decay") and kind is torch.optim.Adam:
            name = "adamw"         # torch's Adam with decoupled weight decay is AdamW's rule
        known = set(keys) | set(_FIXED) | set(_IMPLEMENTATION) | {"params", "initial_lr",
                                                                  "decoupled_weight_decay"}
        unknown = sorted(set(group) - known)
        if unknown:
            raise UnsupportedError(f"{kind.__qualname__}: option {unknown[0]!r} is not one "
                                   f"MemoryX's {name} rule reads")
        hyper = {key: _value(group[key]) for key in keys}
        if chosen is not None and hyper != chosen:
            differ = sorted(k for k in keys if hyper[k] != chosen[k])
            raise UnsupportedError(f"{kind.__qualname__}: parameter group {g} has another "
                                   f"{differ[0]} ({hyper[differ[0]]!r}, group 0: "
                                   f"{chosen[differ[0]]!r}); MemoryX takes one set of "
                                   f"hyperparameters for the whole model")
        chosen = hyper
    return name, chosen


def read_optimizer(optimizer, parameters):
    """MemoryX's optimizer for the ``torch.optim`` ``optimizer`` of a model whose parameters
    are ``parameters`` (a list): every one of them, and nothing else, must be in it."""
    name, hyper = hyperparameters(optimizer)
    held = [p for group in optimizer.param_groups for p in group["params"]]
    mine = {id(p) for p in parameters}
    if any(id(p) not in mine for p in held):
        raise UnsupportedError(f"{type(optimizer).__qualname__} holds parameters that are not "
                               f"the compiled model's")
    missing = mine - {id(p) for p in held}
    if missing:
        raise UnsupportedError(f"{type(optimizer).__qualname__} does not hold {len(missing)} "
                               f"of the model's parameters: MemoryX trains them all")
    if "betas" in hyper:
        hyper["betas"] = tuple(float(b) for b in hyper["betas"])
    try:
        return make_optimizer(name, **hyper)
    except ValueError as error:
        raise UnsupportedError(f"{type(optimizer).__qualname__}: {error}") from None
