# amaranth: UnusedElaboratable=no
"""The mesh: ``rows x cols`` tiles wired to their neighbours, with stream ports on its edges.

:class:`Mesh` is the composition in Amaranth terms (wavelet streams, for other Amaranth designs
such as the FPGA tops); :class:`AxiStreamMesh` wraps it with flat AXI4-Stream ports for Verilog
users and test drivers (``wse export --mesh RxC``). The contract is ``docs/mesh.md``.

The magic comment on the first line: a shared-tile mesh makes a strapped tile only for its
signature (every position instantiates the tile's Verilog module instead), so that tile is never
elaborated on purpose.
"""

from functools import cache

from amaranth.hdl import Cat, ClockSignal, Const, Instance, Module, ResetSignal, Shape
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from wse.rtl.tile import Tile, strap_values
from wse.rtl.wavelet import COLOR_BITS, DATA_BITS, Direction, Wavelet

from .config import MeshConfig

__all__ = ["Mesh", "AxiStreamMesh", "port_name", "edge_ports", "tile_verilog",
           "TILE_MODULE"]

#: Verilog module name of the one tile every position of a shared-tile mesh instantiates.
TILE_MODULE = "wse_tile"

_NEIGHBOUR = {Direction.E: (0, 1), Direction.S: (1, 0)}


def port_name(place, way):
    """``("edge", "W", 2)``, ``"in"`` -> ``"s_axis_w2"``; ``"out"`` -> ``"m_axis_w2"``."""
    _, side, index = place
    return f"{'s' if way == 'in' else 'm'}_axis_{side.lower()}{index}"


def edge_ports(config):
    """``[(name, way, (r, c), direction)]`` of every edge port of ``config``'s mesh."""
    ports = []
    for place, ways in config.plan.ports.items():
        _, side, index = place
        d = Direction[side]
        tile = {Direction.W: (index, 0), Direction.E: (index, config.cols - 1),
                Direction.N: (0, index), Direction.S: (config.rows - 1, index)}[d]
        for way in (("in", "out") if ways == "inout" else (ways,)):
            ports.append((port_name(place, way), way, tile, d))
    return sorted(ports, key=lambda p: (p[1] == "out", p[0][7], int(p[0][8:])))


class Mesh(wiring.Component):
    """``config.rows x config.cols`` :class:`~rtl.tile.Tile` s with the plan's routes.

    The color plan is checked first (:meth:`fabric.routes.ColorPlan.check`).

    With ``shared_tile`` (the default) every position instantiates one Verilog module,
    :data:`TILE_MODULE`: a tile whose routes, colors, row and column are straps
    (``Tile(straps=True)``) tied to each position's constants. The tile is elaborated,
    exported and compiled once, however large the mesh; :meth:`verilog_dependencies` gives its
    Verilog, which must be compiled with the mesh's (``sim.cocotb_run.build`` and ``wse
    export`` include it). Without it, every position elaborates a tile of its own with the
    constants built in (Amaranth's simulator needs that; synthesis tools fold the same
    constants either way).

    Members
    -------
    s_axis_w<r> : In(stream.Signature(Wavelet))
        Intake of row ``r`` (and ``s_axis_<edge><i>`` for every edge in ``config.edges``).
    m_axis_s<c> : Out(stream.Signature(Wavelet))
        Outlet of column ``c`` (and ``m_axis_<edge><i>`` for every edge in ``config.edges``).
    error : Out(1)
        Some router dropped a wavelet or some core counted an error (sticky).
    overflow : Out(1)
        Some core saturated (sticky).
    idle : Out(1)
        Nothing in flight anywhere: every router queue empty and every core idle.
    """

    def __init__(self, config=None, *, shared_tile=True):
        config = MeshConfig() if config is None else config
        if not isinstance(config, MeshConfig):
            raise TypeError(f"config must be a MeshConfig, not {config!r}")
        config.plan.check()
        self.config = config
        self.shared_tile = bool(shared_tile)
        self.ports = edge_ports(config)
        members = {name: (In if way == "in" else Out)(stream.Signature(Wavelet))
                   for name, way, _, _ in self.ports}
        members.update({"error": Out(1), "overflow": Out(1), "idle": Out(1)})
        super().__init__(members)

    def tile(self, r, c):
        """The :class:`~rtl.tile.Tile` of ``(r, c)`` (a new one: tiles are made per elaboration)."""
        plan = self.config.plan
        return Tile(self.config.core(r, c), routes=plan.routes(r, c), n_colors=plan.n_colors,
                    cfg_color=plan.cfg_color, cfg_route=plan.cfg_route(r, c),
                    depth=self.config.depth, acc_buffers=self.config.acc_buffers,
                    psum_depth=self.config.psum_depth,
                    counter_adders=self.config.counter_adders,
                    held_copies=self.config.held_copies, tag_slots=self.config.tag_slots,
                    crossbar=self.config.crossbar)

    def strapped_tile(self):
        """The tile every position of a shared-tile mesh is (its straps unconnected)."""
        return _strapped_tile(self.config)

    def verilog_dependencies(self):
        """Verilog that must be compiled with this mesh's: the shared tile module, or ``""``."""
        return tile_verilog(self.config) if self.shared_tile else ""

    def _instance(self, m, r, c, template):
        """Instantiate :data:`TILE_MODULE` at ``(r, c)``; return an interface object with the
        tile's members to wire to."""
        plan = self.config.plan
        proxy = template.signature.create(path=(f"tile_{r}_{c}",))
        straps = strap_values(self.config.core(r, c), plan.routes(r, c), plan.cfg_route(r, c))
        ports = [("i", "clk", ClockSignal()), ("i", "rst", ResetSignal())]
        for path, member, value in template.signature.flatten(proxy):
            name = "__".join(str(p) for p in path)
            if name in straps:
                value = Const(straps[name], Shape.cast(member.shape).width)
            ports.append(("i" if member.flow == In else "o", name, value))
        m.submodules[f"tile_{r}_{c}"] = Instance(TILE_MODULE, *ports)
        return proxy

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        tiles = {}
        template = self.strapped_tile() if self.shared_tile else None   # for its signature
        for r, c in cfg.tiles:
            if self.shared_tile:
                tiles[r, c] = self._instance(m, r, c, template)
            else:
                tiles[r, c] = m.submodules[f"tile_{r}_{c}"] = self.tile(r, c)
        for (r, c), tile in tiles.items():
            for d, (dr, dc) in _NEIGHBOUR.items():
                other = tiles.get((r + dr, c + dc))
                if other is None:
                    continue
                near, far = d.name.lower(), d.opposite.name.lower()
                wiring.connect(m, getattr(tile, f"o_{near}"), getattr(other, f"i_{far}"))
                wiring.connect(m, getattr(other, f"o_{far}"), getattr(tile, f"i_{near}"))
        for name, way, (r, c), d in self.ports:
            side = d.name.lower()
            if way == "in":
                wiring.connect(m, wiring.flipped(getattr(self, name)),
                               getattr(tiles[r, c], f"i_{side}"))
            else:
                wiring.connect(m, getattr(tiles[r, c], f"o_{side}"),
                               wiring.flipped(getattr(self, name)))
        # Edge ports that do not exist stay undriven: inputs never valid, outputs never ready.
        m.d.comb += [
            self.error.eq(Cat(*(t.error | t.core_error for t in tiles.values())).any()),
            self.overflow.eq(Cat(*(t.overflow for t in tiles.values())).any()),
            self.idle.eq(Cat(*(t.idle for t in tiles.values())).all()),
        ]
        return m


def _strapped_tile(config):
    plan = config.plan
    return Tile(config.core(0, 0), straps=True, n_colors=plan.n_colors, cfg_color=plan.cfg_color,
                depth=config.depth, acc_buffers=config.acc_buffers, psum_depth=config.psum_depth,
                counter_adders=config.counter_adders, held_copies=config.held_copies,
                tag_slots=config.tag_slots, crossbar=config.crossbar)


@cache
def tile_verilog(config):
    """Verilog of the module :data:`TILE_MODULE` every position of ``config``'s shared-tile mesh
    instantiates (cached per configuration)."""
    from amaranth.back import verilog
    return verilog.convert(_strapped_tile(config), name=TILE_MODULE, emit_src=False)


class AxiStreamMesh(wiring.Component):
    """A :class:`Mesh` with flat AXI4-Stream ports, the top that ``wse export --mesh`` writes.

    Every edge stream ``<s|m>_axis_<edge><index>`` becomes ``_tdata`` (32 bits: the wavelet's
    data), ``_tdest`` (5 bits: its color, the routing tag), ``_tuser`` (1 bit: the control
    bit), ``_tvalid`` and ``_tready``: an AXI4-Stream of 4-byte beats without ``tlast``
    (wavelets are not packets). ``error``, ``overflow`` and ``idle`` are :class:`Mesh`'s.
    """

    FIELDS = (("tdata", DATA_BITS), ("tdest", COLOR_BITS), ("tuser", 1))

    def __init__(self, config=None, *, shared_tile=True):
        self.mesh = Mesh(config, shared_tile=shared_tile)
        self.config = self.mesh.config
        members = {}
        for name, way, _, _ in self.mesh.ports:
            into = In if way == "in" else Out
            back = Out if way == "in" else In
            for field, width in self.FIELDS:
                members[f"{name}_{field}"] = into(width)
            members[f"{name}_tvalid"] = into(1)
            members[f"{name}_tready"] = back(1)
        members.update({"error": Out(1), "overflow": Out(1), "idle": Out(1)})
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.mesh = mesh = self.mesh
        for name, way, _, _ in mesh.ports:
            port = getattr(mesh, name)
            flat = {f: getattr(self, f"{name}_{f}") for f in ("tdata", "tdest", "tuser",
                                                               "tvalid", "tready")}
            if way == "in":
                m.d.comb += [
                    port.payload.data.eq(flat["tdata"]), port.payload.color.eq(flat["tdest"]),
                    port.payload.ctrl.eq(flat["tuser"]), port.valid.eq(flat["tvalid"]),
                    flat["tready"].eq(port.ready),
                ]
            else:
                m.d.comb += [
                    flat["tdata"].eq(port.payload.data), flat["tdest"].eq(port.payload.color),
                    flat["tuser"].eq(port.payload.ctrl), flat["tvalid"].eq(port.valid),
                    port.ready.eq(flat["tready"]),
                ]
        m.d.comb += [self.error.eq(mesh.error), self.overflow.eq(mesh.overflow),
                     self.idle.eq(mesh.idle)]
        return m

    def verilog_dependencies(self):
        return self.mesh.verilog_dependencies()
