"""The tile: a router and the core behind its ramp, the unit a mesh repeats."""

from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .core import Core
from .core_params import CoreParams
from .router import Router
from .wavelet import MAX_COLORS, Direction, Wavelet

__all__ = ["Tile", "MESH_PORTS"]

MESH_PORTS = (Direction.N, Direction.E, Direction.S, Direction.W)


class Tile(wiring.Component):
    """A :class:`~rtl.router.Router` with a :class:`~rtl.core.Core` on its ramp.

    The router's ramp rotates (``ramp_rotates=True``) and the core's psum colors get a router
    queue of their own (queue 1; everything else queue 0), so psums reach the core while it
    cannot take another command (``docs/pe.md``, "Why the ramp rotates").

    Parameters
    ----------
    core : CoreParams
        The core's parameters.
    routes : RouteTable or dict
        The router's initial route table (the mesh's color plan computes it).
    **router_kwargs
        Passed to :class:`~rtl.router.Router` (``n_colors``, ``depth``, ``cfg_color``,
        ``cfg_route``, ``counter_width``); ``n_queues``, ``queue_map`` and ``ramp_rotates``
        are the tile's.

    Members
    -------
    i_n, i_e, i_s, i_w : In(stream.Signature(Wavelet))
    o_n, o_e, o_s, o_w : Out(stream.Signature(Wavelet))
        The router's mesh ports (the ramp stays inside).
    drops, error : Out
        The router's drop counter and sticky error.
    core_error, overflow : Out(1)
        The core's sticky error and overflow flags.
    idle : Out(1)
        Nothing in flight in the router or the core.
    """

    def __init__(self, core, *, routes=None, **router_kwargs):
        if not isinstance(core, CoreParams):
            raise TypeError(f"core must be a CoreParams, not {core!r}")
        for name in ("n_queues", "queue_map", "ramp_rotates"):
            if name in router_kwargs:
                raise ValueError(f"{name} is set by the tile, not by its caller")
        psum_colors = {core.colors.psum_from_n, core.colors.psum_from_s}
        self.core_params = core
        self.router = Router(routes=routes, n_queues=2, ramp_rotates=True,
                             queue_map=[int(c in psum_colors) for c in range(MAX_COLORS)],
                             **router_kwargs)
        self.core = Core(core)
        members = {}
        for d in MESH_PORTS:
            members[f"i_{d.name.lower()}"] = In(stream.Signature(Wavelet))
        for d in MESH_PORTS:
            members[f"o_{d.name.lower()}"] = Out(stream.Signature(Wavelet))
        members.update({"drops": Out(self.router.counter_width), "error": Out(1),
                        "core_error": Out(1), "overflow": Out(1), "idle": Out(1)})
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.router = router = self.router
        m.submodules.core = core = self.core
        wiring.connect(m, router.o_r, core.i)
        wiring.connect(m, core.o, router.i_r)
        for d in MESH_PORTS:
            name = d.name.lower()
            wiring.connect(m, wiring.flipped(getattr(self, f"i_{name}")),
                           getattr(router, f"i_{name}"))
            wiring.connect(m, getattr(router, f"o_{name}"),
                           wiring.flipped(getattr(self, f"o_{name}")))
        m.d.comb += [
            self.drops.eq(router.drops), self.error.eq(router.error),
            self.core_error.eq(core.error), self.overflow.eq(core.overflow),
            self.idle.eq(router.idle & core.idle),
        ]
        return m
