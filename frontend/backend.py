"""Where a compiled model runs (:func:`backend`), and the loop over a data loader
(:class:`DataExecutor`) (``docs/torch.md``).

``backend("cpu")`` is plain PyTorch: the compiled model is the module itself, and only the
sparsity config is applied (to the module's tensors, as MemoryX applies it). Every other name
is a backend of the mesh (:data:`wse.runtime.backends.SIMULATED`: ``golden``, ``verilator``,
``icarus``, ``verilator-cocotb``), trained by weight streaming as ``wse train`` trains: MemoryX,
SwarmX over ``systems`` meshes of ``mesh`` tiles, the datapath ``format``.
"""

from dataclasses import dataclass

from wse.fabric.config import parse_mesh
from wse.host.numbers import FORMATS
from wse.host.swarmx import TRANSPORTS
from wse.runtime.backends import SIMULATED

from .graph import UnsupportedError

__all__ = ["Backend", "backend", "current_backend", "DataExecutor", "BACKENDS"]

#: The backends by name: plain PyTorch, and the mesh's.
BACKENDS = ("cpu", *SIMULATED)

_CURRENT = []


@dataclass
class Backend:
    """A backend's settings (:func:`backend` checks them). ``total_steps`` and
    ``steps_per_epoch`` are a :class:`DataExecutor`'s, for a sparsity schedule's defaults."""
    name: str = "golden"
    mesh: tuple = (4, 4)
    systems: int = 1
    format: str = "int16"
    swarm: str = "inproc"
    fanout: int = 2
    check_golden: bool = False
    loss_scale: int = 16
    seed: int = 0
    total_steps: int | None = None
    steps_per_epoch: int | None = None

    @property
    def is_cpu(self):
        return self.name == "cpu"


def backend(name="golden", *, mesh=(4, 4), systems=1, format="int16", swarm="inproc",
            fanout=2, check_golden=False, loss_scale=16, seed=0):
    """A :class:`Backend`, which becomes the current one (a :class:`DataExecutor` made after it
    tells it the run's length). ``mesh`` is ``(rows, cols)`` or ``"RxC"``; ``seed`` draws the
    random masks (``static``, ``set``); ``check_golden`` compares every mesh result of an RTL
    backend with the golden model."""
    if name not in BACKENDS:
        raise UnsupportedError(f"backend must be one of {', '.join(BACKENDS)}, not {name!r}")
    if format not in FORMATS:
        raise UnsupportedError(f"format must be one of {', '.join(FORMATS)}, not {format!r}")
    if swarm not in TRANSPORTS:
        raise UnsupportedError(f"swarm must be one of {', '.join(TRANSPORTS)}, not {swarm!r}")
    try:
        mesh = parse_mesh(mesh) if isinstance(mesh, str) else tuple(int(n) for n in mesh)
    except (TypeError, ValueError) as error:
        raise UnsupportedError(f"mesh must be (rows, cols) or 'RxC': {error}") from None
    for what, value in (("systems", systems), ("fanout", fanout), ("loss_scale", loss_scale)):
        if not isinstance(value, int) or value < 1:
            raise UnsupportedError(f"{what} must be a positive integer, not {value!r}")
    chosen = Backend(name, mesh, systems, format, swarm, fanout, bool(check_golden),
                     loss_scale, int(seed))
    _CURRENT[:] = [chosen]
    return chosen


def current_backend():
    """The backend :func:`backend` made last, or None."""
    return _CURRENT[0] if _CURRENT else None


class DataExecutor:
    """Batches of ``loader`` (any iterable of ``(inputs, targets)``, a ``DataLoader`` as a rule)
    for ``num_steps`` steps, starting the loader again at each epoch's end; without
    ``num_steps``, one epoch. The current backend learns ``num_steps`` and the loader's length
    (a sparsity schedule's ``end`` and ``update_every`` by default)."""

    def __init__(self, loader, num_steps=None, *, backend=None):
        self.loader = loader
        try:
            self.steps_per_epoch = len(loader)
        except TypeError:
            self.steps_per_epoch = None
        if num_steps is None:
            if self.steps_per_epoch is None:
                raise UnsupportedError("DataExecutor needs num_steps for a loader without a "
                                       "length")
            num_steps = self.steps_per_epoch
        if not isinstance(num_steps, int) or num_steps < 1:
            raise UnsupportedError(f"num_steps must be a positive integer, not {num_steps!r}")
        self.num_steps = num_steps
        self.backend = backend or current_backend()
        if self.backend is not None:
            self.backend.total_steps = num_steps
            self.backend.steps_per_epoch = self.steps_per_epoch

    def __len__(self):
        return self.num_steps

    def __iter__(self):
        done = 0
        while done < self.num_steps:
            empty = True
            for batch in self.loader:
                empty = False
                yield batch
                done += 1
                if done == self.num_steps:
                    return
            if empty:
                raise UnsupportedError("the loader gave no batch")
