"""The router's route state: every color's switch positions, current position and teardown, the
update engine that changes them, and one lookup table per input port read as wavelets arrive."""

from amaranth.hdl import Array, Cat, Module, Mux, ResetSignal, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .arbiter import RoundRobin
from .isa import RouteStrap, route_straps_layout
from .route_table import MAX_POSITIONS, RouteTable
from .validate import integer
from .wavelet import COLOR_BITS, MAX_COLORS, N_PORTS, ControlOp, Direction

__all__ = ["ColorState", "PortRoute", "ResetWalk", "RouteCopy", "RouteLookup", "RouteState",
           "RouteUpdate"]


class PortRoute(data.Struct):
    """A color's current route as one input port sees it."""
    accept: 1          # this port is in the position's rx
    tx:     N_PORTS    # output ports to copy to
    torn:   1          # the color is torn down


class RouteUpdate(data.Struct):
    """A change to one color's route: a position write (``write``) or a switch command."""
    write:    1
    color:    COLOR_BITS
    cmd:      ControlOp      # ADVANCE, RESET or TEARDOWN when not ``write`` (others: no change)
    position: 2
    last:     2
    rx:       N_PORTS
    tx:       N_PORTS


class ColorState(data.Struct):
    """Where a color stands: its current and last positions, and whether it is torn down."""
    current: 2
    last:    2
    torn:    1


class RouteLookup(wiring.Signature):
    """A lookup port as the asking side sees it: ``color`` out, its ``route`` back in the same
    cycle (an asynchronous read of a LUT RAM)."""

    def __init__(self):
        super().__init__({"color": Out(COLOR_BITS), "route": In(PortRoute)})


class RouteState(wiring.Component):
    """Route state shared by a router's inputs.

    Each input port has its own copy of every color's *current* route (:class:`PortRoute`, 32
    entries of 7 bits: a LUT RAM) with two read ports: ``arrive`` (the wavelet on the link) and
    ``head`` (a torn-down wavelet at its queue head, looked up again once the color reopens).
    The positions of every color (four LUT RAMs of ``rx, tx``) and each color's
    :class:`ColorState` (a LUT RAM) are read only by the update engine.

    Updates arrive on ``updates`` (one stream per input), one accepted per cycle round-robin.
    An update accepted in cycle ``k`` is applied at the end of cycle ``k + 1``: a lookup in
    cycle ``k + 2`` sees it. The asking input waits that one cycle.

    After every reset the engine walks the colors (one a cycle, ``n_colors`` cycles) writing the
    initial table, from ``routes`` or from the ``route_init`` straps; ``ready`` is low until it
    has. A reset longer than ``n_colors`` cycles hides the walk.

    Members
    -------
    arrive, head : In(RouteLookup()).array(N_PORTS)
        One per input port (:class:`~rtl.wavelet.Direction` order).
    updates : In(stream.Signature(RouteUpdate)).array(N_PORTS)
        Route writes and switch commands, already checked (color below ``n_colors``).
    ready : Out(1)
        The tables hold the initial routes; lookups are valid.
    route_init : In
        Only with ``straps=True``: position 0 of every color (:func:`~rtl.isa.route_straps_layout`).
    """

    def __init__(self, *, n_colors=24, routes=None, straps=False):
        self.n_colors = integer("n_colors", n_colors, 1, MAX_COLORS)
        self.routes = routes if routes is not None else RouteTable(n_colors)
        self.straps = bool(straps)
        ports = N_PORTS
        members = {
            "arrive": In(RouteLookup()).array(ports),
            "head": In(RouteLookup()).array(ports),
            "updates": In(stream.Signature(RouteUpdate)).array(ports),
            "ready": Out(1),
        }
        if self.straps:
            members["route_init"] = In(route_straps_layout(n_colors))
        super().__init__(members)

    def _initial(self, color, k):
        """Position ``k`` of ``color`` at reset, as an elaboration constant (rx, tx)."""
        positions = self.routes[color]
        return (positions[k].rx, positions[k].tx) if k < len(positions) else (0, 0)

    def elaborate(self, platform):
        m = Module()
        n = self.n_colors
        ports = list(Direction)

        # Per color: current position, last position, teardown.
        states = m.submodules.states = Memory(
            shape=ColorState, depth=n, init=[] if self.straps else [
                {"current": 0, "last": max(len(self.routes[c]), 1) - 1, "torn": 0}
                for c in range(n)])

        # Positions: one LUT RAM per position index, addressed by color.
        positions = []
        for k in range(MAX_POSITIONS):
            init = [] if self.straps else [
                {"rx": rx, "tx": tx} for rx, tx in (self._initial(c, k) for c in range(n))]
            mem = m.submodules[f"positions{k}"] = Memory(shape=RouteStrap, depth=n, init=init)
            positions.append(mem)

        copies = []
        for port in ports:
            init = None if self.straps else [self._initial(c, 0) for c in range(n)]
            copy = m.submodules[f"routes_{port.name.lower()}"] = RouteCopy(port, n, init)
            wiring.connect(m, wiring.flipped(self.arrive[port.value]), copy.arrive)
            wiring.connect(m, wiring.flipped(self.head[port.value]), copy.head)
            copies.append(copy)

        # The walk after reset: color `walk` gets its initial routes this cycle.
        walker = m.submodules.walk = ResetWalk(n) if self.straps else ResetWalk(
            n, initial=[[self._initial(c, k) for c in range(n)] for k in range(MAX_POSITIONS)],
            last=[max(len(self.routes[c]), 1) - 1 for c in range(n)])
        if self.straps:
            m.d.comb += walker.route_init.eq(self.route_init)
        walk, walking, walk_route = walker.walk, walker.walking, walker.routes
        m.d.comb += self.ready.eq(~walking)

        # Arbitration: one update a cycle.
        arbiter = m.submodules.arbiter = RoundRobin(len(ports), hold=False)
        m.d.comb += arbiter.requests.eq(Cat(u.valid & ~walking for u in self.updates))
        for port in ports:
            m.d.comb += self.updates[port.value].ready.eq(
                ~walking & arbiter.valid & (arbiter.grant == port.value))
        stage_valid = Signal()
        stage = Signal(RouteUpdate)
        m.d.sync += stage_valid.eq(arbiter.valid)
        with m.If(arbiter.valid):
            m.d.sync += stage.eq(Array(u.payload for u in self.updates)[arbiter.grant])

        # The engine: the staged update's new position and teardown, and the route to publish.
        color = stage.color
        read_state = states.read_port(domain="comb")
        m.d.comb += read_state.addr.eq(color)
        new = self._next_state(m, stage, read_state.data)
        new_pos, new_torn = new.current, new.torn
        # The walk after reset writes through the engine's own data paths: the walk's route
        # enters as the route written (position 0's, and so the one published) and the
        # walk's color as the one address of every memory, each chosen once rather than at
        # each of the ten memories' write ports. The walk still wins over the engine.
        written = Signal(RouteStrap)
        m.d.comb += written.eq(Mux(walking, walk_route[0], Cat(stage.rx, stage.tx)))
        write = stage.write
        # The route to publish: the position this update writes if it is the new current one
        # (a write never moves it), else the stored one; while walking, the walk's route. One
        # bypass after the choice among the four reads, not one a position before it.
        reads = []
        for mem in positions:
            read = mem.read_port(domain="comb")
            m.d.comb += read.addr.eq(color)
            reads.append(read.data)
        published = Signal(RouteStrap)
        m.d.comb += published.eq(Mux(walking | (write & (stage.position == new_pos)), written,
                                     Array(reads)[new_pos]))
        addr = Signal(range(n))                 # the walk's color, else the engine's
        m.d.comb += addr.eq(Mux(walking, walk, color))

        # Writes: the walk, else the engine.
        write_state = states.write_port()
        m.d.comb += [write_state.addr.eq(addr), write_state.en.eq(walking | stage_valid)]
        with m.If(walking):
            m.d.comb += [write_state.data.current.eq(0), write_state.data.torn.eq(0),
                         write_state.data.last.eq(0 if self.straps else walker.last)]
        with m.Else():
            m.d.comb += write_state.data.eq(new)
        for k, mem in enumerate(positions):
            port = mem.write_port()
            m.d.comb += [port.addr.eq(addr),
                         port.en.eq(walking | (stage_valid & write & (stage.position == k)))]
            if k == 0:
                m.d.comb += port.data.eq(written)
            elif self.straps:   # the walk writes position k's own initial route (strapped: none)
                m.d.comb += port.data.eq(Mux(walking, 0, written))
            else:
                m.d.comb += port.data.eq(Mux(walking, walk_route[k], written))
        for copy in copies:
            m.d.comb += [copy.addr.eq(addr), copy.en.eq(walking | stage_valid),
                         copy.route.eq(published), copy.torn.eq(~walking & new_torn)]
        return m

    @staticmethod
    def _next_state(m, stage, was):
        """The :class:`ColorState` of the staged update's color after it (``was`` before)."""
        new = Signal(ColorState)
        m.d.comb += new.eq(was)
        with m.If(stage.write):
            m.d.comb += new.last.eq(stage.last)
        with m.Else():
            with m.Switch(stage.cmd):
                with m.Case(ControlOp.ADVANCE):
                    m.d.comb += new.current.eq(Mux(was.current >= was.last, 0, was.current + 1))
                with m.Case(ControlOp.RESET):
                    m.d.comb += [new.current.eq(0), new.torn.eq(0)]
                with m.Case(ControlOp.TEARDOWN):
                    m.d.comb += new.torn.eq(1)
        return new


class RouteCopy(wiring.Component):
    """One input port's copy of every color's current route (:class:`PortRoute`), read by the
    port's two lookups and written by the update engine.

    The copy holds a power of two of entries (a color beyond them has no route, and no entry is
    spent on it: on an iCE40, which has no LUT RAM, the copies are flip-flops); entries past
    ``n_colors`` stay "no route". A lookup reads in the cycle it asks (an asynchronous read);
    a write (``en``: ``route`` and ``torn`` at ``addr``) is seen from the next cycle.

    Parameters
    ----------
    port : Direction
    n_colors : int
    init : list of (rx, tx) or None
        Every color's position 0 at reset (None: every entry "no route").

    Members
    -------
    arrive, head : In(RouteLookup())
    addr : In(range(n_colors))
    en, torn : In(1)
    route : In(RouteStrap)
        The color's route as the engine publishes it; the copy keeps its port's ``rx`` bit.
    """

    def __init__(self, port, n_colors, init=None):
        self.port, self.n_colors, self.init = Direction(port), n_colors, init
        super().__init__({"arrive": In(RouteLookup()), "head": In(RouteLookup()),
                          "addr": In(range(n_colors)), "en": In(1), "route": In(RouteStrap),
                          "torn": In(1)})

    def elaborate(self, platform):
        m = Module()
        n, port = self.n_colors, self.port
        depth = 1 << (n - 1).bit_length()
        init = [{"accept": 0, "tx": 0, "torn": 0}] * depth
        for c, (rx, tx) in enumerate(self.init or ()):
            init[c] = {"accept": (rx >> port.value) & 1, "tx": tx, "torn": 0}
        mem = m.submodules.mem = Memory(shape=PortRoute, depth=depth, init=init)
        for lookup in (self.arrive, self.head):
            read = mem.read_port(domain="comb")
            m.d.comb += read.addr.eq(lookup.color)
            if depth == MAX_COLORS:
                m.d.comb += lookup.route.eq(read.data)
            else:
                m.d.comb += lookup.route.eq(Mux(lookup.color < depth, read.data, 0))
        wp = mem.write_port()
        m.d.comb += [wp.addr.eq(self.addr), wp.en.eq(self.en),
                     wp.data.accept.eq(self.route.rx.bit_select(port.value, 1)),
                     wp.data.tx.eq(self.route.tx), wp.data.torn.eq(self.torn)]
        return m


class ResetWalk(wiring.Component):
    """After every reset, the colors one a cycle (``walk``, ``n_colors`` cycles, ``walking``
    meanwhile), each with its initial routes (``routes``, every position) and last position
    (``last``): from the tables given, or (``initial=None``) from the ``route_init`` straps,
    which give position 0 alone (the others and ``last`` are then 0). A reset longer than
    ``n_colors`` cycles hides the walk.

    Parameters
    ----------
    n_colors : int
    initial : list of lists of (rx, tx), or None
        ``initial[k][c]``: position ``k`` of color ``c``.
    last : list of int
        Each color's last position (with ``initial``).

    Members
    -------
    walk : Out(range(n_colors + 1))
    walking : Out(1)
    routes : Out(ArrayLayout(RouteStrap, MAX_POSITIONS))
    last : Out(2)
    route_init : In(route_straps_layout(n_colors))
        Only with ``initial=None``.
    """

    def __init__(self, n_colors, *, initial=None, last=None):
        self.n_colors, self.initial, self.last_positions = n_colors, initial, last
        members = {"walk": Out(range(n_colors + 1)), "walking": Out(1),
                   "routes": Out(data.ArrayLayout(RouteStrap, MAX_POSITIONS)), "last": Out(2)}
        if initial is None:
            members["route_init"] = In(route_straps_layout(n_colors))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        n = self.n_colors
        walk = Signal(range(n + 1), reset_less=True)
        in_reset = Signal(reset_less=True)
        m.d.sync += in_reset.eq(ResetSignal())
        with m.If(ResetSignal() & ~in_reset):
            m.d.sync += walk.eq(0)
        with m.Elif(walk != n):
            m.d.sync += walk.eq(walk + 1)
        m.d.comb += [self.walk.eq(walk), self.walking.eq(walk != n)]
        if self.initial is None:
            m.d.comb += self.routes[0].eq(Array(self.route_init[c] for c in range(n))[walk])
            return m
        for k, routes in enumerate(self.initial):
            table = Array(RouteStrap.const({"rx": rx, "tx": tx}) for rx, tx in routes)
            m.d.comb += self.routes[k].eq(table[walk])
        m.d.comb += self.last.eq(Array(self.last_positions)[walk])
        return m
