"""The mesh's color plan: which color carries what, every tile's route table, and the checks.

A ``rows x cols`` mesh runs sparse GEMMs with these colors (``docs/mesh.md``):

- ``weight`` (0): weights and carriage returns, from the west intake of a row, multicast west to
  east: every core of the row takes each one.
- ``cmd(c)`` (``5 + rows + c``): LOAD / ADDR / READ for the core in column ``c``, from the west
  intake of its row, passed east until it reaches that column.
- ``down(p)`` (1, 2) and ``up(p)`` (3, 4): partial sums between vertical neighbours, the color
  chosen by the parity ``p`` of the sending row (a router copies a color to every output of its
  route, so a row cannot pass on the color it takes: rows alternate).
- ``out(r)`` (``5 + r``): replies of the cores of row ``r`` (READ words, raw results), south
  down their column to the outlet on the south edge. A color per row keeps the rows' replies
  apart when they share an outlet.
- configuration (31): from a row's intake east along the row, ``hops`` routers away.

:meth:`ColorPlan.check` traces every color from where it enters to where it lands and checks
the channel dependency graph of the routers' queues for cycles; a failure is a
:class:`RoutePlanError` that says, in words, which color goes wrong where.
"""

from dataclasses import dataclass
from functools import cached_property

from wse.rtl.core_params import CoreColors
from wse.rtl.route_table import Position, RouteTable
from wse.rtl.validate import count
from wse.rtl.wavelet import MAX_COLORS, Direction

__all__ = ["ColorPlan", "RoutePlanError", "Flow", "trace", "find_cycle", "MAX_MESH_COLORS"]

#: Colors a plan may use: 0..30, color 31 is configuration.
MAX_MESH_COLORS = MAX_COLORS - 1
CFG_COLOR = MAX_COLORS - 1
_STEP = {Direction.N: (-1, 0), Direction.E: (0, 1), Direction.S: (1, 0), Direction.W: (0, -1)}


class RoutePlanError(ValueError):
    """A color plan that would misroute a color or could deadlock; the message says where."""


@dataclass(frozen=True)
class Flow:
    """A color that must get from ``source`` to exactly the places in ``sinks``.

    ``source`` is ``("edge", side, index)`` for an edge port (``side`` one of ``"NESW"``) or
    ``("core", r, c)`` for a core; sinks are ``("core", r, c)`` or ``("edge", side, index)``.
    """
    what: str
    color: int
    source: tuple
    sinks: frozenset


def _where(place):
    kind, *rest = place
    if kind == "core":
        return f"core ({rest[0]},{rest[1]})"
    return f"{ {'N': 'north', 'E': 'east', 'S': 'south', 'W': 'west'}[rest[0]]} edge port {rest[1]}"


def _edge_port(rows, cols, r, c, d):
    """The edge port a tile's output ``d`` leaves the mesh by, or ``None`` if it stays inside."""
    dr, dc = _STEP[d]
    if 0 <= r + dr < rows and 0 <= c + dc < cols:
        return None
    return ("edge", d.name, c if d in (Direction.N, Direction.S) else r)


def trace(flow, routes, takes, rows, cols, ports):
    """Follow ``flow``'s color through ``routes`` (``{(r, c): RouteTable}``, switch position 0).

    ``takes[(r, c)]`` is the set of colors core ``(r, c)`` accepts; ``ports`` the set of edge
    outputs that exist (``("edge", side, index)``). Returns ``(sinks, hops)``: the places the
    color lands, and every ``(r, c, in_port, out_port)`` step it takes inside routers (the
    in-port of a flow from a core is ``R``). Raises :class:`RoutePlanError` when the color is
    dropped, leaves the mesh where there is no port, reaches a core that does not take it, or
    loops.
    """
    color = flow.color
    kind, *rest = flow.source
    if kind == "core":
        frontier = [(rest[0], rest[1], Direction.R)]
    else:
        side = Direction[rest[0]]
        index = rest[1]
        r, c = {Direction.W: (index, 0), Direction.E: (index, cols - 1),
                Direction.N: (0, index), Direction.S: (rows - 1, index)}[side]
        frontier = [(r, c, side)]
    seen, sinks, hops = set(), [], []
    while frontier:
        r, c, port = frontier.pop()
        if (r, c, port) in seen:
            raise RoutePlanError(f"{flow.what} (color {color}) loops: it reaches tile ({r},{c}) "
                                 f"from {port.name} twice")
        seen.add((r, c, port))
        positions = routes[(r, c)][color]
        if not positions:
            raise RoutePlanError(f"{flow.what} (color {color}) reaches tile ({r},{c}) from "
                                 f"{port.name}, which has no route for it: it would be dropped")
        position = positions[0]
        if not position.rx & port.bit:
            raise RoutePlanError(f"{flow.what} (color {color}) reaches tile ({r},{c}) from "
                                 f"{port.name} but is accepted there only from {position!r}: "
                                 f"it would be dropped")
        if not position.tx:
            raise RoutePlanError(f"{flow.what} (color {color}) has no output at tile ({r},{c}): "
                                 f"it would be dropped")
        for d in Direction.from_mask(position.tx):
            hops.append((r, c, port, d))
            if d == Direction.R:
                if color not in takes[(r, c)]:
                    raise RoutePlanError(f"{flow.what} (color {color}) is sent to core ({r},{c}),"
                                         f" which does not take that color")
                sinks.append(("core", r, c))
                continue
            edge = _edge_port(rows, cols, r, c, d)
            if edge is None:
                dr, dc = _STEP[d]
                frontier.append((r + dr, c + dc, d.opposite))
            elif edge in ports:
                sinks.append(edge)
            else:
                raise RoutePlanError(f"{flow.what} (color {color}) leaves the mesh at tile "
                                     f"({r},{c}) going {d.name}, where there is no port")
    return sinks, hops


def find_cycle(graph):
    """A cycle of ``graph`` (``{node: {successor: reason}}``) as a list of ``(node, reason)``
    pairs, or ``None``."""
    WHITE, GREY, BLACK = 0, 1, 2
    state = dict.fromkeys(graph, WHITE)
    for start in sorted(graph):
        if state[start] != WHITE:
            continue
        stack = [(start, iter(sorted(graph[start].items())))]
        path = [start]
        state[start] = GREY
        while stack:
            node, successors = stack[-1]
            for succ, _ in successors:
                if state.get(succ, WHITE) == GREY:
                    cycle = path[path.index(succ):] + [succ]
                    return [(a, graph[a][b]) for a, b in zip(cycle, cycle[1:])]
                if state.get(succ, WHITE) == WHITE and succ in graph:
                    state[succ] = GREY
                    path.append(succ)
                    stack.append((succ, iter(sorted(graph[succ].items()))))
                    break
            else:
                state[node] = BLACK
                path.pop()
                stack.pop()
    return None


def dependency_graph(flows, hops_of, rows, cols, queue_of):
    """The channel dependency graph of the router queues: node ``(r, c, in_port, queue)``; an
    edge means a wavelet at that queue's head can wait for room in the next one. Cores and edge
    ports are sinks: a core takes every class on its own FIFO (the ramp rotates) and the host
    drains the outlets."""
    graph = {}
    for flow in flows:
        for r, c, port, d in hops_of[flow]:
            node = (r, c, port.name, queue_of(r, c, flow.color))
            graph.setdefault(node, {})
            if d == Direction.R or _edge_port(rows, cols, r, c, d) is not None:
                continue
            dr, dc = _STEP[d]
            nxt = (r + dr, c + dc, d.opposite.name, queue_of(r + dr, c + dc, flow.color))
            graph[node].setdefault(nxt, f"{flow.what} (color {flow.color}) going {d.name}")
            graph.setdefault(nxt, {})
    return graph


class ColorPlan:
    """The color plan of a ``rows x cols`` mesh (see the module docstring).

    Parameters
    ----------
    rows, cols : int
        Mesh size, from 1x1. ``rows + cols`` is at most ``MAX_MESH_COLORS - 5`` (26): every row
        has a reply color and every column a command color.
    edges : str
        Edges (``"NESW"``) whose every tile port is also an edge port in both directions;
        the west intakes and the south outlets always exist.
    """

    weight = 0

    def __init__(self, rows=4, cols=4, *, edges=""):
        rows, cols = count("rows", rows), count("cols", cols)
        if 5 + rows + cols > MAX_MESH_COLORS:
            raise ValueError(f"a {rows}x{cols} mesh needs {5 + rows + cols} colors (5 + rows + "
                             f"cols); the fabric has {MAX_MESH_COLORS} besides configuration, "
                             f"so rows + cols must be at most {MAX_MESH_COLORS - 5}")
        if not isinstance(edges, str) or set(edges) - set("NESW"):
            raise ValueError(f"edges must be a string of N, E, S, W, not {edges!r}")
        self.rows, self.cols = rows, cols
        self.edges = "".join(d for d in "NESW" if d in edges)
        self.n_colors = 5 + rows + cols
        self.cfg_color = CFG_COLOR

    def __repr__(self):
        return f"ColorPlan(rows={self.rows}, cols={self.cols}, edges={self.edges!r})"

    # Colors ----------------------------------------------------------------------------------

    @staticmethod
    def down(parity):
        """Partial sums sent south by rows of ``parity``."""
        return 1 + parity % 2

    @staticmethod
    def up(parity):
        """Partial sums sent north by rows of ``parity``."""
        return 3 + parity % 2

    def out(self, row):
        """Replies of the cores of ``row``."""
        return 5 + row

    def cmd(self, col):
        """Commands for the cores of ``col``."""
        return 5 + self.rows + col

    def core_colors(self, r, c):
        """The :class:`~rtl.core_params.CoreColors` of core ``(r, c)``."""
        return CoreColors(cmd=self.cmd(c), weight=self.weight,
                          psum_from_n=self.down(r + 1), psum_from_s=self.up(r + 1),
                          psum_to_s=self.down(r), psum_to_n=self.up(r), out=self.out(r))

    # Routes ----------------------------------------------------------------------------------

    def routes(self, r, c):
        """The route table of tile ``(r, c)``."""
        last_col = c == self.cols - 1
        table = {self.weight: ("W", "R" if last_col else "RE")}
        for k in range(c, self.cols):
            table[self.cmd(k)] = ("W", "R" if k == c else "E")
        if r < self.rows - 1:
            table[self.down(r)] = ("R", "S")
            table[self.up(r + 1)] = ("S", "R")
        if r > 0:
            table[self.down(r + 1)] = ("N", "R")
            table[self.up(r)] = ("R", "N")
        table[self.out(r)] = ("R", "S")
        for k in range(r):
            table[self.out(k)] = ("N", "S")
        return RouteTable(self.n_colors, table)

    def cfg_route(self, r, c):
        """Configuration enters a row's intake and travels east ``hops`` routers."""
        return Position("W", "" if c == self.cols - 1 else "E")

    def queue_of(self, r, c, color):
        """Router queue of ``color`` at tile ``(r, c)``: the core's psum inputs get queue 1
        (:class:`~rtl.tile.Tile`), everything else queue 0."""
        cc = self.core_colors(r, c)
        return int(color in (cc.psum_from_n, cc.psum_from_s))

    @cached_property
    def ports(self):
        """The edge ports: ``{("edge", side, index): "in" | "out" | "inout"}``."""
        ports = {("edge", "W", r): "in" for r in range(self.rows)}
        ports.update({("edge", "S", c): "out" for c in range(self.cols)})
        for side in self.edges:
            for i in range(self.cols if side in "NS" else self.rows):
                ports[("edge", side, i)] = "inout"
        return ports

    # Checks ----------------------------------------------------------------------------------

    def flows(self):
        """Every color movement the GEMM needs, with where it must land."""
        R, C = self.rows, self.cols
        flows = []
        for r in range(R):
            flows.append(Flow(f"weights of row {r}", self.weight, ("edge", "W", r),
                              frozenset(("core", r, c) for c in range(C))))
            for c in range(C):
                flows.append(Flow(f"commands for core ({r},{c})", self.cmd(c), ("edge", "W", r),
                                  frozenset({("core", r, c)})))
        for r in range(R):
            for c in range(C):
                cc = self.core_colors(r, c)
                if r < R - 1:
                    flows.append(Flow(f"psums south from core ({r},{c})", cc.psum_to_s,
                                      ("core", r, c), frozenset({("core", r + 1, c)})))
                if r > 0:
                    flows.append(Flow(f"psums north from core ({r},{c})", cc.psum_to_n,
                                      ("core", r, c), frozenset({("core", r - 1, c)})))
                flows.append(Flow(f"replies of core ({r},{c})", cc.out, ("core", r, c),
                                  frozenset({("edge", "S", c)})))
        return flows

    def check(self, routes=None):
        """Check ``routes`` (``{(r, c): RouteTable}``, the plan's own by default): every flow
        lands exactly where it must, each psum arrives as the color its receiver takes it by, the
        configuration chain reaches every tile of a row, and the router queues' channel
        dependency graph has no cycle. Raises :class:`RoutePlanError` saying what is wrong."""
        R, C = self.rows, self.cols
        tiles = [(r, c) for r in range(R) for c in range(C)]
        routes = routes or {t: self.routes(*t) for t in tiles}
        takes = {}
        for t in tiles:
            cc = self.core_colors(*t)
            takes[t] = {cc.cmd, cc.weight, cc.psum_from_n, cc.psum_from_s}
        out_ports = {p for p, way in self.ports.items() if way != "in"}
        hops_of = {}
        for flow in self.flows():
            sinks, hops_of[flow] = trace(flow, routes, takes, R, C, out_ports)
            if len(sinks) != len(set(sinks)):
                twice = sorted({s for s in sinks if sinks.count(s) > 1})
                raise RoutePlanError(f"{flow.what} (color {flow.color}) reaches "
                                     f"{', '.join(map(_where, twice))} more than once")
            missing, extra = flow.sinks - set(sinks), set(sinks) - flow.sinks
            if missing:
                raise RoutePlanError(f"{flow.what} (color {flow.color}) never reaches "
                                     f"{', '.join(map(_where, sorted(missing)))}")
            if extra:
                raise RoutePlanError(f"{flow.what} (color {flow.color}) also reaches "
                                     f"{', '.join(map(_where, sorted(extra)))}, which must not "
                                     f"get it")
        for r, c in tiles:
            cc = self.core_colors(r, c)
            if r < R - 1 and cc.psum_to_s != self.core_colors(r + 1, c).psum_from_n:
                raise RoutePlanError(f"core ({r},{c}) sends psums south as color {cc.psum_to_s} "
                                     f"but core ({r + 1},{c}) takes them as "
                                     f"{self.core_colors(r + 1, c).psum_from_n}")
            if r > 0 and cc.psum_to_n != self.core_colors(r - 1, c).psum_from_s:
                raise RoutePlanError(f"core ({r},{c}) sends psums north as color {cc.psum_to_n} "
                                     f"but core ({r - 1},{c}) takes them as "
                                     f"{self.core_colors(r - 1, c).psum_from_s}")
            cfg = self.cfg_route(r, c)
            if not cfg.rx & Direction.W.bit or (c < C - 1 and not cfg.tx & Direction.E.bit):
                raise RoutePlanError(f"configuration from the west intake of row {r} does not "
                                     f"get past tile ({r},{c}) ({cfg!r})")
        graph = dependency_graph(list(hops_of), hops_of, R, C, self.queue_of)
        cycle = find_cycle(graph)
        if cycle:
            steps = "; ".join(f"tile ({r},{c}) {port} queue {q} waits on {why}"
                              for (r, c, port, q), why in cycle)
            raise RoutePlanError(f"the router queues can deadlock: {steps}, back where it "
                                 f"started")

    def describe(self):
        """The plan as text: colors, then each tile's routes."""
        lines = [f"{self.rows}x{self.cols} mesh, {self.n_colors} colors "
                 f"(+ configuration {self.cfg_color})",
                 f"  {self.weight:2}  weights + carriage returns, west to east along each row",
                 f"  {self.down(0):2}, {self.down(1):2}  psums south from even, odd rows",
                 f"  {self.up(0):2}, {self.up(1):2}  psums north from even, odd rows"]
        lines += [f"  {self.out(r):2}  replies of row {r}" for r in range(self.rows)]
        lines += [f"  {self.cmd(c):2}  commands for column {c}" for c in range(self.cols)]
        return "\n".join(lines)
