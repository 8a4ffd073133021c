"""How far the mesh's logits can be from the module's own in PyTorch (``docs/torch.md``,
"The module on the CPU").

The module's parameters hold MemoryX's float32 masters; the mesh computes with them quantised
(``int16``: to the nearest 1/256; ``bf16``: to the nearest bf16) and rounds every layer's
output (``docs/numerics.md``). :func:`logit_bound` follows one input through the layers and
bounds, logit by logit, ``|mesh - torch|``, where ``torch`` is the module's float32 forward pass
on the CPU:

- the inputs, weights and biases are quantised here exactly as MemoryX quantises them
  (:func:`wse.host.numbers.quantise`), and the exact forward pass with them computed
  (``float64``): ``y = Wq a + bq``, ReLU between layers;
- the mesh's ``Y`` differs from it only by its roundings, bounded per layer from the bound
  ``E`` of the layer's inputs: ``|Y - y| <= sum |Wq| E + r``, with ``r`` the rounding of the
  layer: int16 adds exact products exactly and rounds the total once, ``r = 2**-9`` (a value
  near the saturation at 128 makes the bound infinite); bf16 adds in binary32,
  ``(n - 1) 2**-24 sum |Wq| (|a| + E)``, rounds to bf16 (``2**-9`` of the total); the bias
  is either one more binary32 addend before that rounding (on the mesh, resident layers:
  ``n 2**-24`` of the sum with it) or added after it and rounded twice (at the edges:
  ``2**-8`` of the sum): the bound adds both;
- a ReLU does not widen a bound; the last layer's is the logits';
- plus the float32 forward pass's difference from that exact one, computed: the weights'
  quantisation and torch's own rounding.

Where a sample's top logit in PyTorch exceeds every other by more than the two bounds, the mesh
predicts the same class.
"""

import numpy as np
import torch

from wse.host.numbers import quantise, to_float
from wse.rtl.numfmt import number_format

__all__ = ["logit_bound"]

_U = 2.0 ** -24


def _q(fmt, values):
    return to_float(fmt, quantise(fmt, values)[0])


def logit_bound(compiled, x):
    """``(logits, bound, guaranteed)`` for ``x`` (``[tokens, n_in]``) on ``compiled``'s module:
    its float32 logits in PyTorch (``[tokens, classes]``), the bound on ``|mesh - torch|`` of
    each, and for each sample whether the bound guarantees the mesh predicts its class."""
    fmt = number_format(compiled.backend.format)
    bf16 = compiled.backend.format == "bf16"
    x = torch.as_tensor(x, dtype=torch.float32).reshape(len(x), -1)
    with torch.no_grad():
        logits32 = compiled.model(x).numpy().astype(np.float64)
    a = _q(fmt, x.numpy().astype(np.float64).T)      # the mesh's inputs, [features, tokens]
    E = np.zeros_like(a)                                # |A - a|: none at the input
    for j, layer in enumerate(compiled.layers):
        W = layer.module.weight.detach().numpy().astype(np.float64)
        b = (np.zeros(W.shape[0]) if layer.module.bias is None
             else layer.module.bias.detach().numpy().astype(np.float64))
        Wq, bq = _q(fmt, W), _q(fmt, b)
        y = Wq @ a + bq[:, None]                        # exact, with the mesh's weights
        err = np.abs(Wq) @ E
        if bf16:
            reach = np.abs(Wq) @ (np.abs(a) + E)        # bounds sum |Wq| |A|
            bias = np.abs(bq)[:, None]
            # the bias on the mesh: one more binary32 addend, then the one rounding to bf16;
            # at the edges: added to the rounded total, rounded twice more; either is covered
            err += (W.shape[1] - 1) * _U * reach + W.shape[1] * _U * (reach + bias)
            err += 2.0 ** -9 * (reach + bias + err)     # the total rounded to bf16
            err += 2.0 ** -8 * (np.abs(y) + err)        # bf(fl(Z + b)) at the edges
        else:
            err += 2.0 ** -9
            err = np.where(np.abs(y) + err < 127, err, np.inf)     # saturation possible
        if j < len(compiled.layers) - 1:
            a, E = np.maximum(y, 0), err
        else:
            bound = (err + np.abs(logits32.T - y) + 1e-9).T
    top = logits32.argmax(axis=1)
    rows = np.arange(len(top))
    margin = logits32[rows, top][:, None] - logits32
    needed = bound[rows, top][:, None] + bound
    needed[rows, top] = -np.inf
    return logits32, bound, (margin > needed).all(axis=1)
