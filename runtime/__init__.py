"""Running a mesh: the :class:`~wse.runtime.system.System` the host talks to and its backends
(the golden model, the simulators under cocotb, a board behind its serial bridge)."""
