# amaranth: UnusedElaboratable=no
"""The tile: a router and the core behind its ramp, the unit a mesh repeats.

The magic comment above: a tile makes its router and core when it is made, and they are used
exactly when the tile is; an unused tile is still reported, where it was made.
"""

from amaranth.hdl import Cat, Module, Mux
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .core import Core
from .core_params import CoreParams
from .isa import (
    ROUTE_STRAP,
    RouteStrap,
    core_strap_layout,
    core_strap_value,
    route_straps_layout,
    route_straps_value,
)
from .router import Router
from .wavelet import Direction, Wavelet

__all__ = ["Tile", "MESH_PORTS", "strap_values"]

MESH_PORTS = (Direction.N, Direction.E, Direction.S, Direction.W)


def strap_values(core, routes, cfg_route):
    """``{port: constant}`` for the straps of a ``straps=True`` tile that is to behave as
    ``Tile(core, routes=routes, cfg_route=cfg_route)`` with single-position routes."""
    initial = {}
    for color, positions in routes:
        if len(positions) != 1:
            raise ValueError(f"a strapped tile starts with one switch position per color; color "
                             f"{color} has {len(positions)}")
        initial[color] = (positions[0].rx, positions[0].tx)
    return {"strap_routes": route_straps_value(routes.n_colors, initial),
            "strap_cfg_route": int(ROUTE_STRAP.pack(rx=cfg_route.rx, tx=cfg_route.tx)),
            "strap_core": core_strap_value(core)}


class Tile(wiring.Component):
    """A :class:`~rtl.router.Router` with a :class:`~rtl.core.Core` on its ramp.

    The router has one queue per input besides configuration's (``n_queues=1``): the psums
    the core takes skip it (below), and everything else, the core's own output included, shares
    the one queue (a second for the core's psums would be a queue nothing enters: the area in
    ``docs/fpga.md``). The core tells
    the router, for the head each router input offers, whether it can take it (``ramp_offer`` /
    ``ramp_accept``), so the ramp only grants those. The ramp is a register like the router's
    other outputs and the core's ``accept`` a promise for the next cycle
    (``Core(registered_ramp=True)``): the core takes the ramp's word at once (``docs/pe.md``,
    "The ramp: the core says what it can take"). The core's output goes straight to the ramp
    input.

    Psums bypass the router: a wavelet of the core's ``psum_from_n`` color arriving on ``i_n``
    (``psum_from_s`` on ``i_s``) goes straight into the core's psum FIFO, so the owner of an
    output takes a psum from each side and a command from the ramp in the same cycle (through
    the ramp they took one cycle each). Everything else on ``i_n`` / ``i_s`` goes to the router.
    The core takes psums from the bypass alone (``Core(ramp_psums=False)``): the color plan
    never routes a psum color to a ramp, and one routed there at run time reaches the core as a
    foreign color (dropped, counted as an error).

    Parameters
    ----------
    core : CoreParams
        The core's parameters.
    routes : RouteTable or dict
        The router's initial route table (the mesh's color plan computes it).
    acc_buffers, psum_depth, counter_adders, held_copies : int
        The core's accumulator buffers, psum FIFO depth, counter adders and command FIFO's
        held copies (:class:`~rtl.core.Core`).
    straps : bool
        Routes, colors, row and column from input ports (below).
    **router_kwargs
        Passed to :class:`~rtl.router.Router` (``n_colors``, ``depth``, ``cfg_color``,
        ``cfg_route``, ``counter_width``); ``n_queues``, ``queue_map`` and ``ramp_rotates``
        are the tile's.

    Members
    -------
    i_n, i_e, i_s, i_w : In(stream.Signature(Wavelet))
    o_n, o_e, o_s, o_w : Out(stream.Signature(Wavelet))
        The router's mesh ports (the ramp stays inside). Each output is the router's output
        register; an input's ``ready`` follows from the color offered (its queue, or the
        core's psum FIFO), a configuration's ``hops`` and flip-flops, never from a route
        lookup (:class:`~rtl.router_input.RouterInput`), so the path from one tile's output
        register through its neighbour's ``ready`` back into its allocator is a few LUTs long
        and the links need no skid buffers (``docs/router.md``).
    drops, error : Out
        The router's drop counter and sticky error.
    core_error, overflow : Out(1)
        The core's sticky error and overflow flags.
    idle : Out(1)
        Nothing in flight in the router or the core.
    strap_routes, strap_cfg_route, strap_core : In
        Only with ``straps=True``: the router's initial routes and configuration route
        (:class:`~rtl.router.Router` ``route_init``) and the core's colors, row and column
        (:class:`~rtl.core.Core` ``strap``), as inputs instead of ``routes`` and ``core``'s
        colors, row and column, so that every tile of a mesh is one module.
        :func:`strap_values` gives the constants.
    """

    def __init__(self, core, *, routes=None, acc_buffers=2, psum_depth=4, counter_adders=1,
                 held_copies=1, straps=False, **router_kwargs):
        if not isinstance(core, CoreParams):
            raise TypeError(f"core must be a CoreParams, not {core!r}")
        for name in ("n_queues", "queue_map", "ramp_rotates", "ramp_accept", "u_turns"):
            if name in router_kwargs:
                raise ValueError(f"{name} is set by the tile, not by its caller")
        self.core_params = core
        self.straps = bool(straps)
        if self.straps:
            router_kwargs.pop("cfg_route", None)
            self.router = Router(n_queues=1, straps=True, ramp_accept=True,
                                 u_turns=False, **router_kwargs)
        else:
            self.router = Router(routes=routes, n_queues=1, ramp_accept=True,
                                 u_turns=False, **router_kwargs)
        self.core = Core(core, acc_buffers=acc_buffers, psum_depth=psum_depth,
                         counter_adders=counter_adders, held_copies=held_copies,
                         straps=self.straps,
                         registered_ramp=True, ramp_psums=False)
        members = {}
        for d in MESH_PORTS:
            members[f"i_{d.name.lower()}"] = In(stream.Signature(Wavelet))
        for d in MESH_PORTS:
            members[f"o_{d.name.lower()}"] = Out(stream.Signature(Wavelet))
        members.update({"drops": Out(self.router.counter_width), "error": Out(1),
                        "core_error": Out(1), "overflow": Out(1), "idle": Out(1)})
        if self.straps:
            members.update({"strap_routes": In(route_straps_layout(self.router.n_colors)),
                             "strap_cfg_route": In(RouteStrap),
                             "strap_core": In(core_strap_layout(core.rows, core.cols))})
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.router = router = self.router
        m.submodules.core = core = self.core
        wiring.connect(m, router.o_r, core.i)
        # the ramp input's ``ready`` follows from the color the core offers and flip-flops
        # (no route lookup), so the core's output goes to it without a skid buffer
        wiring.connect(m, core.o, router.i_r)
        colors = self.strap_core if self.straps else self.core_params.colors
        bypass = {Direction.N: (colors.psum_from_n, core.psum_n_in),
                  Direction.S: (colors.psum_from_s, core.psum_s_in)}
        for d in MESH_PORTS:
            name = d.name.lower()
            inp, rin = getattr(self, f"i_{name}"), getattr(router, f"i_{name}")
            if d in bypass:     # the core's psums skip the router and its ramp
                color, direct = bypass[d]
                is_psum = inp.payload.color == color
                m.d.comb += [
                    rin.payload.eq(inp.payload), rin.valid.eq(inp.valid & ~is_psum),
                    direct.payload.eq(inp.payload.data), direct.valid.eq(inp.valid & is_psum),
                    inp.ready.eq(Mux(is_psum, direct.ready, rin.ready)),
                ]
            else:
                wiring.connect(m, wiring.flipped(inp), rin)
            wiring.connect(m, getattr(router, f"o_{name}"),
                           wiring.flipped(getattr(self, f"o_{name}")))
        m.d.comb += [
            self.drops.eq(router.drops), self.error.eq(router.error),
            self.core_error.eq(core.error), self.overflow.eq(core.overflow),
            self.idle.eq(router.idle & core.idle),
        ]
        # the core's answer for the head each router input offers, by the head's class: ``cmd``
        # or any other (the psums take the bypass, so on the ramp a psum color is a foreign one)
        m.d.comb += router.ramp_accept.eq(Cat(
            Mux(router.ramp_offer[i] == colors.cmd, core.accept[3], core.accept[0])
            for i in range(len(Direction))))
        if self.straps:
            s = self.strap_core
            m.d.comb += [
                router.route_init.eq(self.strap_routes),
                router.cfg_route_init.eq(self.strap_cfg_route),
                router.queue_map_init.eq(0),          # every color in queue 0
                core.strap.eq(s),
            ]
        return m
