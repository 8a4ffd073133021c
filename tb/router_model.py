"""Reference model of the router: where each wavelet goes, what it looks like there, what is
dropped.

A plain-Python, cycle-free model. It replays each input port's wavelets in order and says, for
each, the outputs it must reach (and the word that arrives there) or that it is dropped. The
order in which wavelets from *different* inputs meet the route state is timing-dependent in
hardware, so the model refuses stimulus whose outcome would depend on it: within one phase, a
color whose route changes (switch commands) is sent from one input only, and a color rewritten
by configuration is not sent at all. Tests run such changes in separate phases.
"""

from dataclasses import dataclass, field

from wse.rtl.route_table import MAX_POSITIONS, Position, RouteTable
from wse.rtl.wavelet import CONFIG, CONTROL, WAVELET, ConfigOp, ControlOp, Direction

__all__ = ["Fate", "RouterModel", "AmbiguousStimulus"]


class AmbiguousStimulus(ValueError):
    """The stimulus has no single correct outcome (see the module docstring)."""


@dataclass
class Fate:
    """What happens to one input wavelet."""
    port: Direction
    word: int
    outputs: list = field(default_factory=list)   # [(Direction, word as it leaves)]
    dropped: bool = False
    consumed: bool = False                         # a configuration applied by this router
    blocked: bool = False                          # waiting behind a torn-down color
    stale: bool = False                            # a switch command queued while torn: inert


_SWITCH = {ControlOp.ADVANCE.value, ControlOp.RESET.value, ControlOp.TEARDOWN.value}


class RouterModel:
    """Route state of one router and the rules that move it.

    Parameters mirror :class:`rtl.router.Router`: ``routes`` is the table at reset.
    """

    def __init__(self, *, n_colors=24, routes=None, cfg_color=31,
                 cfg_route=Position(rx="NESWR", tx=""), n_queues=2, queue_map=None, depth=4):
        self.n_colors = n_colors
        self.cfg_color = cfg_color
        self.queue_map = list(queue_map or [c % n_queues for c in range(32)])
        self.depth = depth
        self.cfg_route = cfg_route if isinstance(cfg_route, Position) else Position(*cfg_route)
        routes = routes if isinstance(routes, RouteTable) else RouteTable(n_colors, routes)
        self.positions = {}
        self.last = {}
        for color in range(n_colors):
            positions = routes[color] or [Position(0, 0)]
            self.last[color] = max(len(routes[color]), 1) - 1
            self.positions[color] = positions + [Position(0, 0)] * (MAX_POSITIONS - len(positions))
        self.current = {color: 0 for color in range(n_colors)}
        self.torn = set()
        self.waiting = {d: [] for d in Direction}    # blocked fates per input, in arrival order
        self.held = {}             # (port, queue) -> wavelets held in that queue
        self.link_blocked = set()  # inputs whose link waits for a full, blocked queue
        self.drops = 0

    def route_of(self, color):
        if color == self.cfg_color:
            return self.cfg_route
        if color < self.n_colors:
            return self.positions[color][self.current[color]]
        return Position(0, 0)

    def phase(self, streams):
        """Replay one phase: ``{port: [word, ...]}``. Returns ``{port: [Fate, ...]}``.

        Also returns wavelets released from a teardown by this phase's configuration, under
        the key ``"released"``.
        """
        self._check_unambiguous(streams)
        fates = {port: [self.arrive(port, word) for word in words]
                 for port, words in streams.items()}
        fates["released"] = self._release()
        return fates

    def queue_of(self, color):
        return "cfg" if color == self.cfg_color else self.queue_map[color]

    def arrive(self, port, word, fate=None):
        """Route one wavelet arriving on ``port``, or hold it where the hardware would.

        A wavelet of a torn-down color stops at the head of its queue and holds everything
        queued behind it (head-of-line); once that queue is full, the wavelet waiting on the
        link holds everything behind it on that input, whatever its color.
        """
        port = Direction(port)
        fate = fate or Fate(port=port, word=word)
        fields = WAVELET.unpack(word)
        color, ctrl, payload = int(fields["color"]), int(fields["ctrl"]), int(fields["data"])
        queue = (port, self.queue_of(color))
        if port in self.link_blocked or self.held.get(queue) or color in self.torn:
            fate.blocked = True
            self.waiting[port].append(fate)
            if port not in self.link_blocked:
                if self.held.get(queue, 0) < self.depth:
                    self.held[queue] = self.held.get(queue, 0) + 1
                    # queued while its color is torn down: forwarded once it reopens, but a
                    # switch command then changes nothing (the reopening RESET set the position)
                    fate.stale = fate.stale or color in self.torn
                else:
                    self.link_blocked.add(port)
            return fate
        fate.blocked = False
        return self._route(fate, color, ctrl, payload)

    def _route(self, fate, color, ctrl, payload):
        route = self.route_of(color)
        is_cfg = color == self.cfg_color
        cfg = {k: int(v) for k, v in CONFIG.unpack(payload).items()} if is_cfg else None
        consume = is_cfg and cfg["hops"] == 0
        if not route.rx & fate.port.bit or (not consume and route.tx == 0):
            fate.dropped = True
            self.drops += 1
            return fate
        if consume:
            fate.consumed = True
            if cfg["target"] >= self.n_colors or cfg["op"] not in {op.value for op in ConfigOp}:
                fate.dropped = True
                self.drops += 1
            else:
                self._configure(cfg)
            return fate
        leaving = payload
        if is_cfg:
            leaving = int(CONFIG.pack(**{**cfg, "hops": cfg["hops"] - 1}))
        word = int(WAVELET.pack(data=leaving, color=color, ctrl=ctrl))
        fate.outputs = [(d, word) for d in Direction.from_mask(route.tx)]
        if ctrl and not is_cfg and not fate.stale:
            op = int(CONTROL.unpack(payload)["op"])
            if op in _SWITCH:
                self._switch(color, op)
        return fate

    def _switch(self, color, op):
        if op == ControlOp.ADVANCE.value:
            current = self.current[color]
            self.current[color] = 0 if current >= self.last[color] else current + 1
        elif op == ControlOp.RESET.value:
            self.current[color] = 0
            self.torn.discard(color)
        elif op == ControlOp.TEARDOWN.value:
            self.torn.add(color)

    def _configure(self, cfg):
        target = cfg["target"]
        if cfg["op"] == ConfigOp.WRITE_ROUTE.value:
            self.positions[target][cfg["position"]] = Position(cfg["rx"], cfg["tx"])
            self.last[target] = cfg["last"]
        else:
            self._switch(target, cfg["cmd"])

    def _release(self):
        """Replay, in arrival order, the held wavelets of every input (some may hold again)."""
        released = []
        for port in Direction:
            held, self.waiting[port] = self.waiting[port], []
            self.link_blocked.discard(port)
            for queue in [q for q in self.held if q[0] == port]:
                del self.held[queue]
            for fate in held:
                self.arrive(port, fate.word, fate)
                if not fate.blocked:
                    released.append(fate)
        return released

    def _check_unambiguous(self, streams):
        senders, switched, configured = {}, set(), set()
        for port, words in streams.items():
            for word in words:
                fields = WAVELET.unpack(word)
                color = int(fields["color"])
                senders.setdefault(color, set()).add(port)
                if color == self.cfg_color:
                    cfg = CONFIG.unpack(int(fields["data"]))
                    if int(cfg["hops"]) == 0:
                        configured.add(int(cfg["target"]))
                elif fields["ctrl"] and int(CONTROL.unpack(int(fields["data"]))["op"]) in _SWITCH:
                    switched.add(color)
        for color in switched:
            if len(senders[color]) > 1:
                raise AmbiguousStimulus(f"Color {color} gets switch commands and is sent from "
                                        f"{len(senders[color])} inputs in one phase")
        for color in configured:
            if color in senders:
                raise AmbiguousStimulus(f"Color {color} is reconfigured and sent in one phase")
