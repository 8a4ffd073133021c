"""The 5-port fabric router: per-color multicast routes, switch positions, run-time
configuration."""


from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .allocator import SwitchAllocator
from .crossbar import MUXES, Crossbar
from .isa import RouteStrap, route_straps_layout
from .route_state import RouteState
from .route_table import Position, RouteTable
from .router_input import RouterInput
from .validate import integer
from .wavelet import COLOR_BITS, MAX_COLORS, N_PORTS, Direction, Wavelet

__all__ = ["Router"]



class Router(wiring.Component):
    """Five-port wavelet router (N, E, S, W and the ramp R to the core).

    Every input port feeds ``n_queues`` queues (plus one of its own for the configuration color,
    so that configuration gets through whatever data is blocked); ``queue_map[color]`` picks the
    queue, so a color stalled in one queue never holds back the others. A wavelet's route is
    looked up as it arrives (:class:`~rtl.router_input.RouterInput`, in per-port LUT-RAM copies
    kept by :class:`~rtl.route_state.RouteState`): accepted when its input port is in ``rx``,
    and queued with its ``tx`` mask. Each input offers one queue head a cycle; each output
    grants one input round-robin (:class:`~rtl.allocator.SwitchAllocator`) through a one-hot
    crossbar (:class:`~rtl.crossbar.Crossbar`) into its output register; a multicast leaves its
    queue once every copy is taken.

    Control wavelets (``ctrl=1``) follow their color's route like data; a switch command
    (``ADVANCE``, ``RESET``, ``TEARDOWN``) takes effect as it is queued, for the wavelets of that
    color behind it (the input waits the two cycles the update takes). A torn-down color waits at
    its queue head until a configuration ``SWITCH RESET`` reopens it; a switch command queued
    meanwhile is forwarded without effect. Wavelets on ``cfg_color`` are configuration: with
    ``hops == 0`` this router applies them on arrival (:class:`~rtl.wavelet.ConfigPayload`),
    otherwise it forwards them along ``cfg_route`` with ``hops - 1``.

    Latency: 2 cycles per hop (a wavelet taken at a clock edge is in its output register at the
    next one; a rotating ramp, not registered, 1). After every reset the route tables are
    written, one color a cycle, and the inputs are not ready until they are. Throughput: one
    wavelet per cycle on every output and every input at once, with ``depth >= 2``. Order is
    kept per (input port, color); nothing is lost under backpressure.

    Bad input: a wavelet whose color has no route, whose route does not accept its input port,
    or whose route has no output, is dropped as it is taken (once its queue has room: an
    input's ``ready`` never depends on the route lookup), and so is a configuration wavelet
    naming a color outside the table or an unknown operation. Drops count in ``drops``
    (saturating, a cycle late) and set the sticky ``error``; the router keeps running.

    Parameters
    ----------
    n_colors : int
        Routable colors ``0 .. n_colors-1`` (24 by default, as on the WSE-2; at most 32, or 31
        with a configuration color).
    routes : RouteTable or dict
        Initial route table, set at elaboration.
    n_queues : int
        Input queues per port, 1..8.
    queue_map : sequence of int
        Queue of each of the 32 colors; ``color % n_queues`` by default. The entry of the
        configuration color is ignored: it always has a queue of its own.
    depth : int
        Entries per queue, at least 2 (full throughput needs a write and a read per cycle).
    cfg_color : int or None
        The reserved configuration color (``n_colors .. 31``), or ``None`` for no run-time
        configuration. Defaults to 31.
    cfg_route : Position
        Route of configuration wavelets; by default accepted from every port and not forwarded.
    counter_width : int
        Width of ``drops`` (16 by default: it saturates, and ``error`` stays set).
    ramp_accept : bool
        The core says, per input, whether it can take the head that input offers: the router
        shows each input's head color (``ramp_offer``) and the ramp output arbitrates only
        among the heads the core accepts (``ramp_accept``), so it never spends a cycle offering
        a wavelet the core must refuse. With a registered ramp (a tile's) the core's answer is
        a promise for the next cycle, when the granted wavelet reaches it (``docs/pe.md``).
    u_turns : bool
        Whether a route may send a wavelet back out of the port it came in by. Without, that
        copy is not made (a route left with no output drops the wavelet) and every output's
        crossbar mux has four inputs instead of five; mesh tiles use that, since a color plan
        never routes back (``docs/router.md``).
    tag_slots : bool
        With 2-deep queues, keep each queue slot's tags (``tx``, torn) in a memory of its own,
        read by the candidate queue alone, so that the allocation loop does not start with a
        multiplexer on the queue memory's address: the same cycles, a faster loop where
        memories are LUT RAM (the ECP5); on the iCE40, whose memories are flip-flops, it only
        costs (``docs/fpga.md``). Deeper queues keep the tags beside the wavelets.
    crossbar : str
        How the crossbar's multiplexers are built (:class:`~rtl.crossbar.Crossbar` ``mux``):
        ``"and_or"``, or ``"binary"`` (with ``u_turns=False``: each output's 4:1 multiplexer a
        tree of 2:1 ones, which the ECP5 builds map to two LUT4s and a ``PFUMX`` a bit instead
        of three LUT4s; the same cycles, ``docs/fpga.md``).
    straps : bool
        Take the initial routes, configuration route and queue map from input ports (see
        ``route_init``) instead of ``routes``, ``cfg_route`` and ``queue_map``.
    ramp_rotates : bool
        The ramp output is not registered: it offers the crossbar's choice directly and the
        core may refuse it (the next cycle another head is offered). The first tile's core,
        which took psums while its command queue was full, needed this to avoid a deadlock;
        tiles now use ``ramp_accept`` with a registered ramp instead (``docs/pe.md``). Off by
        default: every output is then a register and follows the stream rule.

    Members
    -------
    i_n, i_e, i_s, i_w, i_r : In(stream.Signature(Wavelet))
        Input ports.
    o_n, o_e, o_s, o_w, o_r : Out(stream.Signature(Wavelet))
        Output ports.
    drops : Out(counter_width)
        Wavelets dropped since reset (saturates).
    error : Out(1)
        Sticky: some wavelet was dropped.
    idle : Out(1)
        Every queue and output register is empty (nothing in flight in this router).
    ramp_offer : Out(ArrayLayout(COLOR_BITS, N_PORTS))
        Only with ``ramp_accept=True``: ``ramp_offer[i]`` is the color of the head input ``i``
        (the :class:`~rtl.wavelet.Direction` value: N=0 ... R=4) offers this cycle, meaningful
        while it asks for the ramp (the R input never does without ``u_turns``).
    ramp_accept : In(N_PORTS)
        Only with ``ramp_accept=True``: bit ``i`` set when the core would take input ``i``'s
        head if the ramp granted it this cycle (offered now, or in the next cycle from the
        ramp's output register). Asking per input, not per color, keeps a 32-way choice by
        color off the path from the core's promise into the allocator.
    route_init, cfg_route_init, queue_map_init : In
        Only with ``straps=True``: the initial route table (position 0 of each color, a
        :func:`~rtl.isa.route_straps_layout`), the configuration route (a
        :class:`~rtl.isa.RouteStrap`) and the queue of each color (``queue_bits`` each),
        loaded while ``rst`` is high instead of being elaboration constants. Every tile of a
        mesh is then the same module, and only these straps differ.
    """

    def __init__(self, *, n_colors=24, routes=None, n_queues=2, queue_map=None, depth=4,
                 cfg_color=31, cfg_route=Position(rx="NESWR", tx=""), counter_width=16,
                 ramp_rotates=False, straps=False, ramp_accept=False, u_turns=True,
                 tag_slots=True, crossbar="and_or"):
        n_colors = integer("n_colors", n_colors, 1, MAX_COLORS)
        if cfg_color is not None:
            cfg_color = integer("cfg_color", cfg_color)
            if n_colors == MAX_COLORS:
                raise ValueError(f"cfg_color must be None when all {MAX_COLORS} colors are "
                                 f"routable, not {cfg_color!r}")
            if not n_colors <= cfg_color < MAX_COLORS:
                raise ValueError(f"cfg_color must be None or a color in {n_colors}..."
                                 f"{MAX_COLORS - 1} (not routable), not {cfg_color!r}")
        if not isinstance(cfg_route, Position):
            if not isinstance(cfg_route, (tuple, list)) or len(cfg_route) != 2:
                raise ValueError(f"cfg_route must be a Position or an (rx, tx) pair, "
                                 f"not {cfg_route!r}")
            cfg_route = Position(*cfg_route)
        if routes is None:
            routes = RouteTable(n_colors)
        elif isinstance(routes, dict):
            routes = RouteTable(n_colors, routes)
        elif not isinstance(routes, RouteTable):
            raise ValueError(f"routes must be a RouteTable or a dict of color to positions, "
                             f"not {routes!r}")
        if routes.n_colors != n_colors:
            raise ValueError(f"Route table is for {routes.n_colors} colors, not {n_colors}")
        n_queues = integer("n_queues", n_queues, 1, 8)
        if queue_map is None:
            queue_map = [color % n_queues for color in range(MAX_COLORS)]
        queue_map = [integer("queue_map entry", q) for q in queue_map]
        if len(queue_map) != MAX_COLORS or not all(0 <= q < n_queues for q in queue_map):
            raise ValueError(f"queue_map must give a queue in 0..{n_queues - 1} for each of the "
                             f"{MAX_COLORS} colors, not {queue_map!r}")
        depth = integer("depth", depth, 2)
        counter_width = integer("counter_width", counter_width, 1, 64)

        self.n_colors = n_colors
        self.routes = routes
        self.n_queues = n_queues
        self.queue_map = tuple(queue_map)
        self.depth = depth
        self.cfg_color = cfg_color
        self.cfg_route = cfg_route
        self.counter_width = counter_width
        self.ramp_rotates = bool(ramp_rotates)
        self.straps = bool(straps)
        self.has_ramp_accept = bool(ramp_accept)
        self.u_turns = bool(u_turns)
        self.tag_slots = bool(tag_slots)
        if crossbar not in MUXES:
            raise ValueError(f"crossbar must be one of {', '.join(MUXES)}, not {crossbar!r}")
        if crossbar == "binary" and self.u_turns:
            raise ValueError("crossbar='binary' builds 4-input outputs: it needs u_turns=False")
        self.crossbar = crossbar
        if self.straps and any(True for _ in self.routes):
            raise ValueError("a strapped router takes its routes from route_init, not routes")
        self.queue_bits = max(1, (n_queues - 1).bit_length())

        members = {}
        for d in Direction:
            members[f"i_{d.name.lower()}"] = In(stream.Signature(Wavelet))
        for d in Direction:
            members[f"o_{d.name.lower()}"] = Out(stream.Signature(Wavelet))
        members["drops"] = Out(counter_width)
        members["error"] = Out(1)
        members["idle"] = Out(1)
        if self.has_ramp_accept:
            members["ramp_offer"] = Out(data.ArrayLayout(COLOR_BITS, len(Direction)))
            members["ramp_accept"] = In(len(Direction))
        if self.straps:
            members["route_init"] = In(route_straps_layout(n_colors))
            members["cfg_route_init"] = In(RouteStrap)
            members["queue_map_init"] = In(data.ArrayLayout(self.queue_bits, MAX_COLORS))
        super().__init__(members)

    def params(self):
        """The parameters as a JSON-able dict; ``Router.from_params`` rebuilds the router."""
        return {"n_colors": self.n_colors, "routes": self.routes.to_json(),
                "n_queues": self.n_queues, "queue_map": list(self.queue_map),
                "depth": self.depth, "cfg_color": self.cfg_color,
                "cfg_route": [self.cfg_route.rx, self.cfg_route.tx],
                "counter_width": self.counter_width, "ramp_rotates": self.ramp_rotates,
                "u_turns": self.u_turns, "tag_slots": self.tag_slots,
                "crossbar": self.crossbar}

    @classmethod
    def from_params(cls, params):
        params = dict(params)
        n_colors = params.get("n_colors", 24)
        if "routes" in params:
            params["routes"] = RouteTable.from_json(n_colors, params["routes"])
        if "cfg_route" in params:
            params["cfg_route"] = Position(*params["cfg_route"])
        return cls(**params)

    def port_in(self, direction):
        return getattr(self, f"i_{Direction(direction).name.lower()}")

    def port_out(self, direction):
        return getattr(self, f"o_{Direction(direction).name.lower()}")

    def registered(self, port):
        """Whether output ``port`` has an output register (all but a rotating ramp's)."""
        return not (self.ramp_rotates and port == Direction.R)

    def elaborate(self, platform):
        m = Module()
        Q = self.n_queues + (self.cfg_color is not None)     # the last one for configuration
        queue_map = list(self.queue_map)
        if self.cfg_color is not None:
            queue_map[self.cfg_color] = Q - 1
        ports = list(Direction)

        state = m.submodules.route_state = RouteState(
            n_colors=self.n_colors, routes=None if self.straps else self.routes,
            straps=self.straps)
        if self.straps:
            m.d.comb += state.route_init.eq(self.route_init)
        if self.straps:
            cfg_rx, cfg_tx = self.cfg_route_init.rx, self.cfg_route_init.tx
        else:
            cfg_rx, cfg_tx = Const(self.cfg_route.rx, N_PORTS), Const(self.cfg_route.tx, N_PORTS)

        inputs = []
        for port in ports:
            name = port.name.lower()
            inp = m.submodules[f"input_{name}"] = RouterInput(
                n_queues=Q, depth=self.depth, n_colors=self.n_colors, cfg_color=self.cfg_color,
                port=port, u_turns=self.u_turns, tag_slots=self.tag_slots)
            inputs.append(inp)
            wiring.connect(m, wiring.flipped(self.port_in(port)), inp.i)
            wiring.connect(m, inp.arrive, state.arrive[port.value])
            wiring.connect(m, inp.head, state.head[port.value])
            wiring.connect(m, inp.update, state.updates[port.value])
            color = self.port_in(port).payload.color
            if Q > 1 and self.straps:
                strapped = self.queue_map_init[color]
                if self.cfg_color is not None:
                    strapped = Mux(color == self.cfg_color, Q - 1, strapped)
                m.d.comb += inp.queue.eq(strapped)
            elif Q > 1:
                m.d.comb += inp.queue.eq(Array(Const(q, range(Q)) for q in queue_map)[color])
            m.d.comb += [
                inp.enable.eq(state.ready),
                inp.cfg_route.accept.eq(cfg_rx[port.value]),
                inp.cfg_route.tx.eq(cfg_tx),
                inp.cfg_route.torn.eq(0),
            ]

        # Allocation and crossbar.
        pairs = {(i.value, o.value) for i in ports for o in ports if self.u_turns or i != o}
        alloc = m.submodules.allocator = SwitchAllocator(len(ports), pairs=pairs)
        xbar = m.submodules.crossbar = Crossbar(Wavelet, len(ports), len(ports), pairs=pairs,
                                                     mux=self.crossbar)
        for inp, port in zip(inputs, ports):
            request = inp.request
            if self.has_ramp_accept:
                m.d.comb += self.ramp_offer[port.value].eq(inp.offer.color)
                request = Cat(request[:Direction.R.value],
                              request[Direction.R.value] & self.ramp_accept[port.value])
            m.d.comb += [alloc.requests[port.value].eq(request),
                         xbar.inputs[port.value].eq(inp.offer)]
        m.d.comb += xbar.select.eq(alloc.grants)

        # Outputs: a register each (the stream rule holds by construction), except a rotating
        # ramp, which offers the crossbar's choice directly and lets the core refuse it.
        taken = Signal(len(ports))
        for port in ports:
            out = self.port_out(port)
            granted = alloc.grants[port.value].any()
            if self.registered(port):
                free = ~out.valid | out.ready
                m.d.comb += [alloc.free[port.value].eq(free), taken[port.value].eq(1)]
                with m.If(free):
                    m.d.sync += [out.valid.eq(granted),
                                 out.payload.eq(xbar.outputs[port.value])]
            else:
                m.d.comb += [alloc.free[port.value].eq(1), taken[port.value].eq(out.ready),
                             out.valid.eq(granted), out.payload.eq(xbar.outputs[port.value])]
        for inp, port in zip(inputs, ports):
            m.d.comb += inp.served.eq(alloc.served[port.value] & taken)

        outputs_empty = Cat(~self.port_out(p).valid for p in ports if self.registered(p))
        m.d.comb += self.idle.eq(Cat(inp.empty for inp in inputs).all() & outputs_empty.all())

        # Drop counter and sticky error.
        # the drops as they happen into registers, their sum into the counter in the next
        # cycle (the counter and ``error`` move in the same cycle as when the sum was the
        # register): an input's drop decision, its arrival logic's last step, ends at a
        # register instead of running on into the adder
        dropped = [Signal.like(inp.drops, name=f"dropped_{p.name.lower()}")
                   for inp, p in zip(inputs, ports)]
        m.d.sync += [d.eq(inp.drops) for d, inp in zip(dropped, inputs)]
        n_dropped = Signal(range(2 * len(ports) + 1))
        m.d.comb += n_dropped.eq(sum(dropped))
        total = Signal(self.counter_width + 1)
        m.d.comb += total.eq(self.drops + n_dropped)
        limit = (1 << self.counter_width) - 1
        m.d.sync += self.drops.eq(Mux(total > limit, limit, total))
        with m.If(n_dropped != 0):
            m.d.sync += self.error.eq(1)
        return m
