"""The mesh's color plan: which color carries what, every tile's route table, and the checks.

A ``rows x cols`` mesh runs sparse GEMMs with at most 24 routable colors however large it is
(``docs/mesh.md``):

- ``weight`` (0): weights and carriage returns, from the west intake of a row, multicast west to
  east: every core of the row takes each one.
- ``down(p)`` (1, 2) and ``up(p)`` (3, 4): partial sums between vertical neighbours, the color
  chosen by the parity ``p`` of the sending row (a router copies a color to every output of its
  route, so a row cannot pass on the color it takes: rows alternate).
- ``cmd`` (5): LOAD / ADDR / READ, from the west intake of a row, multicast along it like the
  weights; a SELECT wavelet in the stream names the column whose core takes the commands that
  follow (the others discard them, ``docs/pe.md``).
- ``out(r)`` (``6 + r % K``): replies of the cores of row ``r`` (READ words, raw results), south
  down their column to the outlet on the south edge. ``K`` (:attr:`ColorPlan.reply_colors`) is
  ``min(rows, 18)``: the colors left. Rows ``K`` apart share a color (their routes merge on the
  way south), so the host never lets two of them reply in the same exchange
  (:meth:`ColorPlan.read_groups`, :meth:`ColorPlan.raw_rows`).
- configuration (31): from a row's intake east along the row, ``hops`` routers away.

:meth:`ColorPlan.check` traces every color from where it enters to where it lands, checks that
each SELECT reaches exactly one core of its row and that rows replying together have distinct
reply colors, and checks the channel dependency graph of the routers' queues for cycles; a
failure is a :class:`RoutePlanError` that says, in words, which color goes wrong where.
"""

from functools import cached_property

from wse.rtl.core_params import CoreColors
from wse.rtl.route_table import MAX_HOPS, Position, RouteTable
from wse.rtl.validate import count, integer
from wse.rtl.wavelet import MAX_COLORS, Direction

from .route_trace import Flow, RoutePlanError, dependency_graph, find_cycle, trace, where

__all__ = ["ColorPlan", "RoutePlanError", "Flow", "trace", "find_cycle", "MAX_MESH_COLORS",
           "MAX_REPLY_COLORS", "MAX_COLS"]

#: Routable colors a plan uses at most (the WSE-2's 24); color 31 is configuration.
MAX_MESH_COLORS = 24
#: Colors other than the replies': weight, four psum colors, cmd.
_FIXED_COLORS = 6
#: Reply colors at most: the routable colors left.
MAX_REPLY_COLORS = MAX_MESH_COLORS - _FIXED_COLORS
#: Columns at most: configuration reaches tile ``(r, c)`` with ``hops = c`` (6 bits).
MAX_COLS = MAX_HOPS + 1
CFG_COLOR = MAX_COLORS - 1


class ColorPlan:
    """The color plan of a ``rows x cols`` mesh (see the module docstring).

    Parameters
    ----------
    rows, cols : int
        Mesh size, from 1x1; ``cols`` at most :data:`MAX_COLS` (64: configuration travels
        ``hops`` routers east of its intake, and ``hops`` has 6 bits). ``rows`` has no limit.
    edges : str
        Edges (``"NESW"``) whose every tile port is also an edge port in both directions;
        the west intakes and the south outlets always exist.
    reply_colors : int, optional
        ``K``, the reply colors: ``min(rows, 18)`` (every color left) by default; fewer make
        rows share them on a small mesh, as on a large one (a test of the sharing).
    """

    weight = 0
    cmd = 5

    def __init__(self, rows=4, cols=4, *, edges="", reply_colors=None):
        rows, cols = count("rows", rows), count("cols", cols)
        if cols > MAX_COLS:
            raise ValueError(f"cols must be at most {MAX_COLS} (configuration reaches a tile "
                             f"hops routers east of its row's intake, and hops has 6 bits), "
                             f"not {cols}")
        if not isinstance(edges, str) or set(edges) - set("NESW"):
            raise ValueError(f"edges must be a string of N, E, S, W, not {edges!r}")
        most = min(rows, MAX_REPLY_COLORS)
        self.reply_colors = most if reply_colors is None else integer(
            "reply_colors", reply_colors, 1, most)
        self.rows, self.cols = rows, cols
        self.edges = "".join(d for d in "NESW" if d in edges)
        self.n_colors = _FIXED_COLORS + self.reply_colors
        self.cfg_color = CFG_COLOR

    def __repr__(self):
        return (f"ColorPlan(rows={self.rows}, cols={self.cols}, edges={self.edges!r}, "
                f"reply_colors={self.reply_colors})")

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
        """Replies of the cores of ``row`` (shared by the rows ``reply_colors`` apart)."""
        return _FIXED_COLORS + row % self.reply_colors

    def core_colors(self, r, c):
        """The :class:`~rtl.core_params.CoreColors` of core ``(r, c)``."""
        return CoreColors(cmd=self.cmd, weight=self.weight,
                          psum_from_n=self.down(r + 1), psum_from_s=self.up(r + 1),
                          psum_to_s=self.down(r), psum_to_n=self.up(r), out=self.out(r))

    def core_col(self, r, c):
        """The column strap of core ``(r, c)``: the SELECT argument it answers to."""
        return c

    # Who replies when ------------------------------------------------------------------------

    def read_groups(self):
        """The rows whose cores the host may READ in one exchange: ``reply_colors`` rows at a
        time, in order (one group when every row has a color of its own)."""
        K = self.reply_colors
        return [list(range(g, min(g + K, self.rows))) for g in range(0, self.rows, K)]

    def raw_rows(self):
        """The rows that may own raw results (``CR_OUT``: they reply while the compute phase
        runs, all in one exchange): every row, or with more rows than reply colors the middle
        ``reply_colors`` rows (pairwise distinct colors; the psum chains to them are the
        shortest)."""
        K = self.reply_colors
        start = (self.rows - K) // 2
        return list(range(start, start + K))

    def exchanges(self):
        """``[(what, rows)]``: the sets of rows that reply in one exchange."""
        groups = self.read_groups()
        return [(f"READ group {g} of {len(groups)}", rows) for g, rows in enumerate(groups)] + [
            ("raw results", self.raw_rows())]

    # Routes ----------------------------------------------------------------------------------

    def routes(self, r, c):
        """The route table of tile ``(r, c)``."""
        east = "R" if c == self.cols - 1 else "RE"
        table = {self.weight: ("W", east), self.cmd: ("W", east)}
        if r < self.rows - 1:
            table[self.down(r)] = ("R", "S")
            table[self.up(r + 1)] = ("S", "R")
        if r > 0:
            table[self.down(r + 1)] = ("N", "R")
            table[self.up(r)] = ("R", "N")
        for k in range(max(0, r - self.reply_colors), r):     # replies from rows above
            table[self.out(k)] = ("N", "S")
        own = self.out(r)
        table[own] = ("NR", "S") if own in table else ("R", "S")     # merges with a row above
        return RouteTable(self.n_colors, table)

    def cfg_route(self, r, c):
        """Configuration enters a row's intake and travels east ``hops`` routers."""
        return Position("W", "" if c == self.cols - 1 else "E")

    def queue_of(self, r, c, color):
        """Router queue of ``color`` at tile ``(r, c)``: 0, a tile's router has one queue per
        input besides configuration's (:class:`~rtl.tile.Tile`; the psums a core takes skip
        the router, :meth:`bypassed`)."""
        return 0

    def bypassed(self, r, c, port, color):
        """Whether ``color`` arriving on ``port`` of tile ``(r, c)`` goes straight into its
        core's psum FIFO (:class:`~rtl.tile.Tile`): ``psum_from_n`` on N, ``psum_from_s`` on S."""
        cc = self.core_colors(r, c)
        port = Direction(port)
        return (port, color) in ((Direction.N, cc.psum_from_n), (Direction.S, cc.psum_from_s))

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
            row = frozenset(("core", r, c) for c in range(C))
            flows.append(Flow(f"weights of row {r}", self.weight, ("edge", "W", r), row))
            flows.append(Flow(f"commands of row {r}", self.cmd, ("edge", "W", r), row))
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
        lands exactly where it must, each SELECT picks exactly its core out of the row's, rows
        that reply in one exchange have distinct reply colors, each psum arrives as the color
        its receiver takes it by, the configuration chain reaches every tile of a row, and the
        router queues' channel dependency graph has no cycle. Raises :class:`RoutePlanError`
        saying what is wrong."""
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
                                     f"{', '.join(map(where, twice))} more than once")
            missing, extra = flow.sinks - set(sinks), set(sinks) - flow.sinks
            if missing:
                raise RoutePlanError(f"{flow.what} (color {flow.color}) never reaches "
                                     f"{', '.join(map(where, sorted(missing)))}")
            if extra:
                raise RoutePlanError(f"{flow.what} (color {flow.color}) also reaches "
                                     f"{', '.join(map(where, sorted(extra)))}, which must not "
                                     f"get it")
        self._check_selection()
        self._check_replies()
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
        graph = dependency_graph(list(hops_of), hops_of, R, C, self.queue_of, self.bypassed)
        cycle = find_cycle(graph)
        if cycle:
            steps = "; ".join(f"tile ({r},{c}) {port} queue {q} waits on {why}"
                              for (r, c, port, q), why in cycle)
            raise RoutePlanError(f"the router queues can deadlock: {steps}, back where it "
                                 f"started")

    def _check_selection(self):
        """The commands after ``SELECT c`` in row ``r``'s stream reach every core of the row
        (the flows say so); exactly core ``(r, c)`` must keep them."""
        for r in range(self.rows):
            straps = [self.core_col(r, c) for c in range(self.cols)]
            for c in range(self.cols):
                keep = [k for k, strap in enumerate(straps) if strap == c]
                if keep != [c]:
                    wrong = ", ".join(f"core ({r},{k})" for k in keep) or "no core"
                    raise RoutePlanError(f"commands for core ({r},{c}) (after SELECT {c} on "
                                         f"color {self.cmd}) are kept by {wrong}: the column "
                                         f"straps of row {r} are {straps}")

    def _check_replies(self):
        """Every row is read in exactly one READ group, and rows that reply in one exchange
        have pairwise distinct reply colors (order is kept per outlet and color only)."""
        read = sorted(r for rows in self.read_groups() for r in rows)
        if read != list(range(self.rows)):
            raise RoutePlanError(f"the READ groups must hold every row once, not {read}")
        for what, rows in self.exchanges():
            seen = {}
            for r in rows:
                color = self.out(r)
                if color in seen:
                    raise RoutePlanError(f"rows {seen[color]} and {r} reply in the same exchange "
                                         f"({what}) on the same color {color}: their words "
                                         f"would mix at the outlets")
                seen[color] = r

    def describe(self):
        """The plan as text: colors, then who replies when."""
        K = self.reply_colors
        lines = [f"{self.rows}x{self.cols} mesh, {self.n_colors} colors "
                 f"(+ configuration {self.cfg_color})",
                 f"  {self.weight:2}  weights + carriage returns, west to east along each row",
                 f"  {self.down(0):2}, {self.down(1):2}  psums south from even, odd rows",
                 f"  {self.up(0):2}, {self.up(1):2}  psums north from even, odd rows",
                 f"  {self.cmd:2}  commands, west to east along each row (SELECT picks the "
                 f"column)"]
        for k in range(K):
            lines.append(f"  {self.out(k):2}  replies of rows "
                         f"{', '.join(map(str, range(k, self.rows, K)))}")
        lines.append(f"  READ groups {self.read_groups()}; raw results owned by rows "
                     f"{self.raw_rows()}")
        return "\n".join(lines)
