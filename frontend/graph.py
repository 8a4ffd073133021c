"""Reading a ``torch.nn.Module`` as the chain of layers the mesh runs (``docs/torch.md``).

The model's ``forward`` is read with :func:`torch.fx.symbolic_trace` (the graph of what it
calls, without running it on data), so that a ``torch.tanh`` or a residual add inside
``forward`` is seen as well as a ``Conv2d`` among the submodules. What maps: one input, an
optional flatten of it, then ``Linear`` layers (with or without bias), each but the last
followed by a ReLU (``nn.ReLU``, ``F.relu``, ``torch.relu`` or ``.relu()``), the last one's
output returned as the logits. Anything else is refused with :class:`UnsupportedError`, one line
naming the module path (or the call) and its type, before anything runs.
"""

import importlib
import operator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import fx, nn

__all__ = ["UnsupportedError", "LinearLayer", "read_model", "type_name"]

#: The chain's text, for the messages.
CHAIN = "wse.torch maps a chain of Linear layers with a ReLU between each two"

_RELU_FUNCTIONS = {F.relu, torch.relu, torch.relu_}
_FLATTEN_FUNCTIONS = {torch.flatten}


class UnsupportedError(ValueError):
    """A model, an optimizer or a setting that the mesh cannot run as written (one line)."""


@dataclass(frozen=True)
class LinearLayer:
    """One ``Linear`` of the chain: its module path and the module (a ReLU follows every one
    but the last)."""
    path: str
    module: nn.Linear

    @property
    def name(self):
        """The layer's name in MemoryX: its path made an identifier (``fc1`` stays ``fc1``,
        ``layers.0`` becomes ``layers_0``, ``0`` becomes ``layer_0``)."""
        name = self.path.replace(".", "_")
        return name if name.isidentifier() else f"layer_{name}"

    @property
    def bias(self):
        return self.module.bias is not None


def type_name(kind):
    """``torch.nn.Conv2d`` rather than ``torch.nn.modules.conv.Conv2d``: the public name."""
    module = kind.__module__
    for package in ("torch.nn", "torch.optim"):
        if module.startswith(package + ".") and getattr(
                importlib.import_module(package), kind.__qualname__, None) is kind:
            return f"{package}.{kind.__qualname__}"
    return f"{module}.{kind.__qualname__}"


def _describe(node, model):
    """``path (type)`` of an fx node, for a message."""
    if node.op == "call_module":
        return f"{node.target} ({type_name(type(model.get_submodule(node.target)))})"
    if node.op == "call_function":
        if node.target in (operator.add, operator.iadd, torch.add):
            return f"a residual add ({node.name}: {node.args[0]} + {node.args[1]})"
        name = getattr(node.target, "__name__", str(node.target))
        module = getattr(node.target, "__module__", None) or "torch"
        if module.startswith("torch._C") or module == "torch.functional":
            module = "torch"
        return f"{module}.{name} (called as {node.name})"
    if node.op == "call_method":
        return f"the tensor method .{node.target}() (called as {node.name})"
    if node.op == "get_attr":
        return f"the attribute {node.target} (a tensor read in forward)"
    return f"{node.name} ({node.op})"


def _refuse(node, model, why=None):
    raise UnsupportedError(f"{_describe(node, model)} cannot run on the mesh: "
                           f"{why or CHAIN}")


def read_model(model):
    """The ``Linear`` layers of ``model`` in order (:class:`LinearLayer`), or
    :class:`UnsupportedError` naming the first thing that does not map."""
    if not isinstance(model, nn.Module):
        raise UnsupportedError(f"the model must be a torch.nn.Module, not "
                               f"{type(model).__name__}")
    try:
        graph = fx.symbolic_trace(model).graph
    except Exception as error:      # torch.fx's own error names what it could not follow
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise UnsupportedError(f"the model's forward cannot be read with torch.fx "
                               f"({type(error).__name__}: {first}); {CHAIN}") from None
    nodes = [n for n in graph.nodes]
    inputs = [n for n in nodes if n.op == "placeholder"]
    if len(inputs) != 1:
        raise UnsupportedError(f"the model's forward must take one input, not "
                               f"{len(inputs)} ({', '.join(n.name for n in inputs)})")
    layers, relu_after = [], []
    current = inputs[0]            # the node whose value flows along the chain
    flatten_ok = True
    seen_modules = set()
    for node in nodes:
        if node.op in ("placeholder", "output"):
            continue
        users = list(node.users)
        if len(users) > 1:
            _refuse(node, model, f"its output is used {len(users)} times "
                                 f"({', '.join(u.name for u in users)}); {CHAIN}")
        tensors = [a for a in node.all_input_nodes]
        if node.op == "call_function" and node.target in (operator.add, operator.iadd,
                                                          torch.add):
            _refuse(node, model)
        if tensors != [current]:
            _refuse(node, model, f"it does not take the chain's value ({current.name}) as its "
                                 f"one tensor input; {CHAIN}")
        if node.op == "call_module":
            module = model.get_submodule(node.target)
            if type(module) is nn.Linear:
                if node.target in seen_modules:
                    _refuse(node, model, "it is called twice (a shared layer); " + CHAIN)
                seen_modules.add(node.target)
                if layers and not relu_after[-1]:
                    _refuse(node, model, f"it follows {layers[-1].path} without a ReLU "
                                         f"between them; {CHAIN}")
                if module.weight.dtype != torch.float32:
                    _refuse(node, model, f"its weight is {module.weight.dtype}, not "
                                         f"torch.float32")
                layers.append(LinearLayer(node.target, module))
                relu_after.append(False)
            elif type(module) is nn.ReLU:
                _relu(node, model, layers, relu_after)
            elif type(module) is nn.Flatten and flatten_ok:
                pass
            elif type(module) in (nn.Identity,) or (type(module) is nn.Dropout
                                                     and module.p == 0):
                pass
            else:
                _refuse(node, model)
        elif node.op == "call_function" and node.target in _RELU_FUNCTIONS:
            _relu(node, model, layers, relu_after)
        elif node.op == "call_method" and node.target in ("relu", "relu_"):
            _relu(node, model, layers, relu_after)
        elif flatten_ok and (node.op == "call_function" and node.target in _FLATTEN_FUNCTIONS
                             or node.op == "call_method" and node.target == "flatten"):
            pass
        else:
            _refuse(node, model)
        if layers:
            flatten_ok = False
        current = node
    if not layers:
        raise UnsupportedError(f"the model has no Linear layer; {CHAIN}")
    if relu_after[-1]:
        raise UnsupportedError(f"{layers[-1].path} (torch.nn.Linear) is followed by a ReLU: "
                               f"the last Linear's output must be the logits, returned as they "
                               f"are")
    output = [n for n in nodes if n.op == "output"][0]
    if output.all_input_nodes != [current]:
        raise UnsupportedError(f"the model must return the last Linear's output alone, not "
                               f"{output.args[0]!r}")
    for a, b in zip(layers, layers[1:]):
        if a.module.out_features != b.module.in_features:
            raise UnsupportedError(f"{b.path} (torch.nn.Linear) takes {b.module.in_features} "
                                   f"inputs but {a.path} gives {a.module.out_features}")
    names = [layer.name for layer in layers]
    if len(set(names)) != len(names):
        raise UnsupportedError(f"the layers' paths do not give distinct names: {names}")
    return layers


def _relu(node, model, layers, relu_after):
    if not layers:
        _refuse(node, model, "a ReLU before the first Linear would change the input; " + CHAIN)
    relu_after[-1] = True
