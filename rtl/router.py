"""The 5-port fabric router: per-color multicast routes, switch positions, run-time
configuration."""


from amaranth.hdl import Array, Cat, Const, Module, Mux, ResetSignal, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from .arbiter import RoundRobin
from .isa import RouteStrap, route_straps_layout
from .route_table import MAX_POSITIONS, Position, RouteTable
from .shift_fifo import ShiftFIFO
from .validate import integer
from .wavelet import (
    MAX_COLORS,
    WAVELET_BITS,
    ConfigOp,
    ConfigPayload,
    ControlOp,
    ControlPayload,
    Direction,
    Wavelet,
)

__all__ = ["Router"]


_SWITCH_OPS = (ControlOp.ADVANCE, ControlOp.RESET, ControlOp.TEARDOWN)


class Router(wiring.Component):
    """Five-port wavelet router (N, E, S, W and the ramp R to the core).

    Every input port feeds ``n_queues`` FIFOs (plus one of its own for the configuration color,
    so that configuration gets through whatever data is blocked); ``queue_map[color]`` picks the
    queue, so a color
    stalled in one queue never holds back the heads of the others. Each queue head is routed by
    its color's current switch position: accepted when its input port is in ``rx``, then copied to
    every port in ``tx`` (a multicast leaves the queue once every copy is taken). Each output
    arbitrates round-robin among the queue heads that want it.

    Control wavelets (``ctrl=1``) follow their color's route like data; a switch command
    (``ADVANCE``, ``RESET``, ``TEARDOWN``) then takes effect for the wavelets of that color behind
    it. A torn-down color waits in its queue until a configuration ``SWITCH RESET`` reopens it.
    Wavelets on ``cfg_color`` are configuration: with ``hops == 0`` this router applies them
    (:class:`~rtl.wavelet.ConfigPayload`), otherwise it forwards them along ``cfg_route`` with
    ``hops - 1``.

    Latency: 1 cycle per hop (a wavelet accepted on an input is offered on its outputs on the next
    cycle). Throughput: one wavelet per cycle on every output and every input at once, with
    ``depth >= 2``. Order is kept per (input port, color); nothing is lost under backpressure.

    Bad input: a wavelet whose color has no route, whose route does not accept its input port,
    or whose route has no output, is dropped when it reaches its queue head, and so is a
    configuration wavelet naming a color outside the table or an unknown operation. Drops count
    in ``drops`` (saturating) and set the sticky ``error``; the router keeps running.

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
        Width of ``drops``.
    ramp_accept : bool
        The core says, per color, what it can take this cycle (``ramp_accept``): the ramp
        output arbitrates only among queue heads of those colors, so it never spends a cycle
        offering a wavelet the core must refuse.
    straps : bool
        Take the initial routes, configuration route and queue map from input ports (see
        ``route_init``) instead of ``routes``, ``cfg_route`` and ``queue_map``.
    ramp_rotates : bool
        When the core does not take the ramp output's offer, offer the next queue head instead
        (see :class:`~rtl.arbiter.RoundRobin` ``hold=False``). A core that takes psums while its
        command queue is full needs this to avoid a deadlock (``docs/pe.md``). Off by default:
        every port then follows the stream rule.

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
        Every queue is empty (nothing in flight in this router).
    ramp_accept : In(32)
        Only with ``ramp_accept=True``: bit ``c`` set when the core would take a wavelet of
        color ``c`` this cycle.
    route_init, cfg_route_init, queue_map_init : In
        Only with ``straps=True``: the initial route table (position 0 of each color, a
        :func:`~rtl.isa.route_straps_layout`), the configuration route (a
        :class:`~rtl.isa.RouteStrap`) and the queue of each color (``queue_bits`` each),
        loaded while ``rst`` is high instead of being elaboration constants. Every tile of a
        mesh is then the same module, and only these straps differ.
    """

    def __init__(self, *, n_colors=24, routes=None, n_queues=2, queue_map=None, depth=4,
                 cfg_color=31, cfg_route=Position(rx="NESWR", tx=""), counter_width=32,
                 ramp_rotates=False, straps=False, ramp_accept=False):
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
            members["ramp_accept"] = In(MAX_COLORS)
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
                "counter_width": self.counter_width, "ramp_rotates": self.ramp_rotates}

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

    def elaborate(self, platform):
        m = Module()
        Q = self.n_queues + (self.cfg_color is not None)     # the last one for configuration
        queue_map = list(self.queue_map)
        if self.cfg_color is not None:
            queue_map[self.cfg_color] = Q - 1

        # Route state, one entry per routable color; missing colors read as "no route".
        pos_rx, pos_tx, last, current, torn = [], [], [], [], []
        for color in range(self.n_colors):
            positions = self.routes[color] or [Position(0, 0)]
            positions += [Position(0, 0)] * (MAX_POSITIONS - len(positions))
            pos_rx.append(Array(Signal(5, init=p.rx, name=f"c{color}_rx{k}",
                                       reset_less=self.straps)
                                for k, p in enumerate(positions)))
            pos_tx.append(Array(Signal(5, init=p.tx, name=f"c{color}_tx{k}",
                                       reset_less=self.straps)
                                for k, p in enumerate(positions)))
            last.append(Signal(2, init=max(len(self.routes[color]), 1) - 1,
                               name=f"c{color}_last", reset_less=self.straps))
            current.append(Signal(2, name=f"c{color}_pos"))
            torn.append(Signal(name=f"c{color}_torn"))
        cur_rx = Array(Signal(5, name=f"c{c}_cur_rx") for c in range(MAX_COLORS))
        cur_tx = Array(Signal(5, name=f"c{c}_cur_tx") for c in range(MAX_COLORS))
        cur_torn = Array(Signal(name=f"c{c}_cur_torn") for c in range(MAX_COLORS))
        for color in range(self.n_colors):
            m.d.comb += [
                cur_rx[color].eq(pos_rx[color][current[color]]),
                cur_tx[color].eq(pos_tx[color][current[color]]),
                cur_torn[color].eq(torn[color]),
            ]
        if self.cfg_color is not None:
            cfg_route = self.cfg_route_init if self.straps else self.cfg_route
            cfg_rx, cfg_tx = cfg_route.rx, cfg_route.tx
            m.d.comb += [cur_rx[self.cfg_color].eq(cfg_rx), cur_tx[self.cfg_color].eq(cfg_tx)]

        # Input queues.
        heads = []                       # (port, queue, head wavelet view, head valid, fifo)
        for port in Direction:
            inp = self.port_in(port)
            queue_of = Signal(range(Q), name=f"{port.name.lower()}_queue")
            if Q > 1 and self.straps:
                strapped = self.queue_map_init[inp.payload.color]
                if self.cfg_color is not None:
                    strapped = Mux(inp.payload.color == self.cfg_color, Q - 1, strapped)
                m.d.comb += queue_of.eq(strapped)
            elif Q > 1:
                m.d.comb += queue_of.eq(Array(Const(q, range(Q)) for q in queue_map)
                                        [inp.payload.color])
            ready = Array(Signal(name=f"{port.name.lower()}_q{q}_w_rdy") for q in range(Q))
            for q in range(Q):
                # 2-deep queues as shift registers: no read multiplexer, and on an iCE40 each
                # bit's flip-flop shares a logic cell with the LUT in front of it (ShiftFIFO).
                fifo_class = ShiftFIFO if self.depth <= 2 else SyncFIFO
                fifo = m.submodules[f"fifo_{port.name.lower()}{q}"] = \
                    fifo_class(width=WAVELET_BITS, depth=self.depth)
                m.d.comb += [
                    fifo.w_data.eq(inp.payload),
                    fifo.w_en.eq(inp.valid & (queue_of == q)),
                    ready[q].eq(fifo.w_rdy),
                ]
                heads.append((port, q, data.View(Wavelet, fifo.r_data), fifo.r_rdy, fifo))
            m.d.comb += inp.ready.eq(ready[queue_of])

        m.d.comb += self.idle.eq(~Cat(*(valid for _, _, _, valid, _ in heads)).any())

        # Classify every queue head.
        H = len(heads)
        present = Signal(H)          # offered to its outputs this cycle
        remaining = Signal(H * 5)    # outputs it still needs, this cycle
        pop = Signal(H)
        dropped = Signal(H)
        wants_token = Signal(H)      # needs the single route-update slot this cycle
        out_payload = []
        head_colors = []             # each head's color (a constant for the configuration queue)
        started = [Signal(name=f"h{h}_started") for h in range(H)]
        pending = [Signal(5, name=f"h{h}_pending") for h in range(H)]
        granted = [Signal(5, name=f"h{h}_granted") for h in range(H)]

        token = m.submodules.update_token = RoundRobin(H)
        m.d.comb += [token.requests.eq(wants_token), token.ready.eq(1)]

        upd = Signal(name="upd_en")
        upd_write = Signal()
        upd_color = Signal(range(MAX_COLORS))
        upd_cmd = Signal(ControlOp)
        upd_cfg = Signal(ConfigPayload)

        # A head's route lookup needs one rx bit (its own port's): per port, the rx bit of
        # every color as one vector.
        rx_of_port = {port: Cat(cur_rx[c][port.value] for c in range(MAX_COLORS))
                      for port in Direction}
        for h, (port, q, head, head_valid, fifo) in enumerate(heads):
            # The configuration queue holds the configuration color only, and no other queue
            # ever holds it: its head's color is a constant, and so is is_cfg everywhere.
            cfg_queue = self.cfg_color is not None and q == Q - 1
            color = Const(self.cfg_color, 5) if cfg_queue else head.color
            ctrl_op = data.View(ControlPayload, head.data).op
            cfg = data.View(ConfigPayload, head.data)
            is_cfg = Const(int(cfg_queue), 1)
            accepted = rx_of_port[port].bit_select(color, 1)
            tx = cur_tx[color]
            is_switch = (head.ctrl & ~is_cfg
                         & ctrl_op.as_value().matches(*(op.value for op in _SWITCH_OPS)))
            consume = is_cfg & (cfg.hops == 0)
            fresh = head_valid & ~started[h]
            has_token = token.valid & (token.grant == h)

            rem = Signal(5, name=f"h{h}_rem")
            drop = Signal(name=f"h{h}_drop")
            m.d.comb += [
                drop.eq(fresh & ~cur_torn[color] & (~accepted | (~consume & (tx == 0)))),
                wants_token[h].eq(fresh & ~drop & ~cur_torn[color] & (consume | is_switch)),
                rem.eq(Mux(started[h], pending[h], tx)),
                present[h].eq(head_valid & ~consume & ~drop &
                              (started[h] | (~cur_torn[color] & (~is_switch | has_token)))),
                remaining.word_select(h, 5).eq(Mux(present[h], rem, 0)),
            ]
            forwarded = Signal(Wavelet, name=f"h{h}_out")
            m.d.comb += forwarded.eq(head)
            with m.If(is_cfg):
                m.d.comb += data.View(ConfigPayload, forwarded.data).hops.eq(cfg.hops - 1)
            out_payload.append(forwarded)
            head_colors.append(color)

            left = Signal(5, name=f"h{h}_left")
            m.d.comb += left.eq(rem & ~granted[h])
            applied = consume & has_token
            m.d.comb += pop[h].eq(drop | applied | (present[h] & (left == 0)))
            m.d.comb += fifo.r_en.eq(pop[h])
            with m.If(pop[h]):
                m.d.sync += started[h].eq(0)
            with m.Elif(present[h]):
                m.d.sync += [started[h].eq(1), pending[h].eq(left)]

            bad_target = applied & ((cfg.target >= self.n_colors) |
                                    ~cfg.op.as_value().matches(*(op.value for op in ConfigOp)))
            m.d.comb += dropped[h].eq(drop | bad_target)
            with m.If(has_token & ~bad_target):
                m.d.comb += [
                    upd.eq(1),
                    upd_write.eq(consume & (cfg.op == ConfigOp.WRITE_ROUTE)),
                    upd_color.eq(Mux(consume, cfg.target, color)),
                    upd_cmd.eq(Mux(consume, cfg.cmd, ctrl_op)),
                ]
                if cfg_queue:       # only a route write reads it, and only these heads write
                    m.d.comb += upd_cfg.eq(cfg)

        # Output arbitration and crossbar.
        for port in Direction:
            out = self.port_out(port)
            rotates = self.ramp_rotates and port == Direction.R
            arbiter = m.submodules[f"arbiter_{port.name.lower()}"] = RoundRobin(H, hold=not rotates)
            requests = [remaining.word_select(h, 5)[port.value] for h in range(H)]
            if self.has_ramp_accept and port == Direction.R:
                requests = [want & self.ramp_accept.bit_select(head_colors[h], 1)
                            for h, want in enumerate(requests)]
            m.d.comb += [
                arbiter.requests.eq(Cat(*requests)),
                arbiter.ready.eq(out.ready),
                out.valid.eq(arbiter.valid),
                out.payload.eq(Array(p.as_value() for p in out_payload)[arbiter.grant]),
            ]
            for h in range(H):
                m.d.comb += granted[h][port.value].eq(
                    out.valid & out.ready & (arbiter.grant == h))

        # Route updates: at most one per cycle, chosen by the update token.
        with m.If(upd):
            for color in range(self.n_colors):
                with m.If(upd_color == color):
                    with m.If(upd_write):
                        m.d.sync += [
                            pos_rx[color][upd_cfg.position].eq(upd_cfg.rx),
                            pos_tx[color][upd_cfg.position].eq(upd_cfg.tx),
                            last[color].eq(upd_cfg.last),
                        ]
                    with m.Elif(upd_cmd == ControlOp.ADVANCE):
                        m.d.sync += current[color].eq(
                            Mux(current[color] >= last[color], 0, current[color] + 1))
                    with m.Elif(upd_cmd == ControlOp.RESET):
                        m.d.sync += [current[color].eq(0), torn[color].eq(0)]
                    with m.Elif(upd_cmd == ControlOp.TEARDOWN):
                        m.d.sync += torn[color].eq(1)

        # Straps: while in reset, load the initial routes (last assignment wins over updates).
        if self.straps:
            with m.If(ResetSignal()):
                for color in range(self.n_colors):
                    m.d.sync += [
                        pos_rx[color][0].eq(self.route_init[color].rx),
                        pos_tx[color][0].eq(self.route_init[color].tx),
                        last[color].eq(0),
                    ]
                    for k in range(1, MAX_POSITIONS):
                        m.d.sync += [pos_rx[color][k].eq(0), pos_tx[color][k].eq(0)]

        # Drop counter and sticky error.
        n_dropped = Signal(range(H + 1))
        m.d.comb += n_dropped.eq(sum(dropped[h] for h in range(H)))
        total = Signal(self.counter_width + 1)
        m.d.comb += total.eq(self.drops + n_dropped)
        limit = (1 << self.counter_width) - 1
        m.d.sync += self.drops.eq(Mux(total > limit, limit, total))
        with m.If(n_dropped != 0):
            m.d.sync += self.error.eq(1)
        return m

