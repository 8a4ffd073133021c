"""Running a mesh: the :class:`System` the host talks to (:mod:`.system`) and its backends,
the golden model (:mod:`.golden`), the compiled Verilator model (:mod:`.compiled`), the
simulators under cocotb (:mod:`.simulator`, with their socket in :mod:`.wire`) and a board
behind its serial bridge (:mod:`.board`), opened by name through :func:`open_system`
(:mod:`.backends`). Everything public is importable from here."""

from .backends import BACKENDS, REGISTRY, RTL_SIMULATED, SIMULATED, SIMULATORS, open_system
from .board import BoardError, BoardSystem
from .compiled import CompiledSystem
from .golden import GoldenSystem
from .simulator import CocotbSystem
from .system import Exchange, GemmResult, SimulationError, System

__all__ = ["System", "Exchange", "GemmResult", "SimulationError", "GoldenSystem",
           "CompiledSystem", "CocotbSystem", "BoardSystem", "BoardError", "REGISTRY", "BACKENDS",
           "SIMULATED", "RTL_SIMULATED", "SIMULATORS", "open_system"]
