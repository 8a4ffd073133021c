"""The backends by name: the registry :func:`open_system` opens from, and the names a command
line offers (``--backend`` from :data:`BACKENDS`, ``--sim`` from :data:`SIMULATORS`)."""

from types import MappingProxyType

from wse.sim.cocotb_run import SIMULATORS

from .board import BoardSystem
from .compiled import CompiledSystem
from .golden import GoldenSystem
from .simulator import CocotbSystem

__all__ = ["REGISTRY", "BACKENDS", "SIMULATED", "RTL_SIMULATED", "SIMULATORS", "open_system"]


def _cocotb(sim):
    def open_simulator(config=None, **options):
        return CocotbSystem(config, sim=sim, **options)
    open_simulator.__doc__ = f":class:`CocotbSystem` on {sim}."
    return open_simulator


#: Backend name -> ``factory(config=None, **options)`` returning a :class:`~.system.System`.
#: ``verilator`` is the compiled model (whole exchanges in C++); ``icarus`` and
#: ``verilator-cocotb`` run the mesh under cocotb, one Python call per cycle (the testbenches'
#: path, for debugging).
REGISTRY = MappingProxyType({
    "golden": GoldenSystem,
    "verilator": CompiledSystem,     # options: engine=, waves=, watchdog=, reply_timeout=, threads=
    "icarus": _cocotb("icarus"),
    "verilator-cocotb": _cocotb("verilator"),
    "board": BoardSystem,            # options: port= (required), baud=, timeout=, fifo_depth=
})
#: Every backend's name.
BACKENDS = tuple(REGISTRY)
#: The backends that need no hardware: the golden model and the simulators.
SIMULATED = ("golden", "verilator", "icarus", "verilator-cocotb")
#: The backends that run the RTL in a simulator.
RTL_SIMULATED = SIMULATED[1:]


def open_system(backend="golden", config=None, **options):
    """A :class:`~.system.System` of ``backend`` (one of :data:`BACKENDS`) for ``config``, with
    the backend's ``options``; use it as a context manager."""
    if not isinstance(backend, str) or backend not in REGISTRY:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
    return REGISTRY[backend](config, **options)
