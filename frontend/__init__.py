"""``wse.torch``: a plain PyTorch model, optimizer, loss and data loader trained on the mesh by
weight streaming (``docs/torch.md``).

.. code-block:: python

    import wse.torch as wtorch

    backend = wtorch.backend("golden", systems=2)           # or "verilator", ...; "cpu"
    compiled = wtorch.compile(model, backend)                # a chain of Linear and ReLU
    optimizer = wtorch.optim.Adam(model.parameters(), lr=0.01)   # torch.optim's, checked
    model.apply(wtorch.sparse.configure({"algorithm": "gmp", "sparsity": 0.9,
                                         "param_filter": "hidden*.weight"}))

    @wtorch.trace
    def training_step(x, y):
        loss = torch.nn.functional.cross_entropy(compiled(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return loss

    for x, y in wtorch.DataExecutor(loader, num_steps=400):
        training_step(x, y)
    torch.save(model.state_dict(), "trained.pt")             # the trained weights
"""

from . import optim, sparse
from .backend import BACKENDS, Backend, DataExecutor, backend, current_backend
from .compiled import CompiledModel, compile, trace
from .graph import UnsupportedError

__all__ = ["backend", "Backend", "BACKENDS", "current_backend", "compile", "CompiledModel",
           "trace", "DataExecutor", "optim", "sparse", "UnsupportedError"]
