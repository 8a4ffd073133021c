"""Route tables: what a router does with each color, and the configuration wavelets that set it.

A color's route is a list of one to four *switch positions*, each an ``rx`` mask (input ports
the color is accepted from) and a ``tx`` mask (output ports it is copied to; several bits make a
multicast). Control wavelets move a color between its positions; configuration wavelets rewrite
positions at run time. This module is plain Python: the router elaborates a :class:`RouteTable`
into its initial state, the reference models read it, and the host turns it into configuration
wavelets with :meth:`RouteTable.config_wavelets`.
"""

import operator
from dataclasses import dataclass

from .validate import integer
from .wavelet import CONFIG, MAX_COLORS, WAVELET, ConfigOp, ControlOp, Direction

__all__ = ["MAX_POSITIONS", "MAX_HOPS", "Position", "RouteTable",
           "config_write", "config_switch"]


MAX_POSITIONS = 4
MAX_HOPS = (1 << CONFIG.fields["hops"][1]) - 1


@dataclass(frozen=True)
class Position:
    """One switch position of a color: accepted from ``rx``, copied to ``tx`` (5-bit masks)."""
    rx: int
    tx: int

    def __post_init__(self):
        object.__setattr__(self, "rx", Direction.mask(self.rx))
        object.__setattr__(self, "tx", Direction.mask(self.tx))

    def __repr__(self):
        def names(mask):
            return "".join(d.name for d in Direction.from_mask(mask)) or "-"
        return f"Position(rx={names(self.rx)!r}, tx={names(self.tx)!r})"


class RouteTable:
    """The route table of one router.

    Parameters
    ----------
    n_colors : int
        Routable colors ``0 .. n_colors-1`` (at most 32).
    routes : dict
        ``{color: position or [positions]}``; a position is a :class:`Position`, an ``(rx, tx)``
        tuple, or a two-element list of masks or strings (``["W", "ER"]``, as JSON gives it);
        ``rx`` and ``tx`` are masks, strings such as ``"WR"``, or lists of directions. A list of
        anything else is a list of positions. Colors not named have no route: their wavelets
        are dropped.
    """

    def __init__(self, n_colors=24, routes=None):
        self.n_colors = integer("n_colors", n_colors, 1, MAX_COLORS)
        self._routes = {}
        for color, positions in (routes or {}).items():
            self[color] = positions

    def __setitem__(self, color, positions):
        color = integer("Route color", color, 0, self.n_colors - 1)
        if isinstance(positions, (Position, tuple)) or (
                isinstance(positions, list) and len(positions) == 2
                and all(isinstance(p, (str, int)) for p in positions)):
            positions = [positions]     # one position: a tuple, or a JSON pair like ["W", "E"]
        if not isinstance(positions, (list, tuple)):
            raise ValueError(f"Route of color {color} must be a position or a list of "
                             f"positions, not {positions!r}")
        for p in positions:
            if not isinstance(p, Position) and not (isinstance(p, (tuple, list)) and len(p) == 2):
                raise ValueError(f"A switch position of color {color} must be an (rx, tx) pair, "
                                 f"not {p!r}")
        positions = [p if isinstance(p, Position) else Position(*p) for p in positions]
        if not 1 <= len(positions) <= MAX_POSITIONS:
            raise ValueError(f"Color {color} must have 1..{MAX_POSITIONS} switch positions, "
                             f"not {len(positions)}")
        self._routes[color] = positions

    def __getitem__(self, color):
        """The positions of ``color`` (empty when it has no route)."""
        return list(self._routes.get(operator.index(color), []))

    def __contains__(self, color):
        return color in self._routes

    def __iter__(self):
        return iter(sorted(self._routes.items()))

    def __eq__(self, other):
        return (isinstance(other, RouteTable) and other.n_colors == self.n_colors
                and dict(other) == dict(self))

    def __repr__(self):
        return f"RouteTable(n_colors={self.n_colors}, routes={dict(self)!r})"

    def to_json(self):
        """``{"color": [[rx, tx], ...]}`` with integer masks, for JSON."""
        return {str(color): [[p.rx, p.tx] for p in positions] for color, positions in self}

    @classmethod
    def from_json(cls, n_colors, table):
        return cls(n_colors, {int(color): [tuple(p) for p in positions]
                              for color, positions in table.items()})

    def config_wavelets(self, cfg_color, *, hops=0, reset=True):
        """Configuration wavelets (packed ``uint64`` words) that load this table into a router
        ``hops`` routers away along the configuration route.

        Every position of every routed color is written; with ``reset`` each color is then
        switched back to position 0 (which also ends a teardown). Colors without a route are
        not touched: a running router keeps whatever it had for them.
        """
        words = []
        for color, positions in self:
            for index, position in enumerate(positions):
                words.append(config_write(color, index, position.rx, position.tx,
                                          last=len(positions) - 1, hops=hops))
            if reset:
                words.append(config_switch(color, ControlOp.RESET, hops=hops))
        return [int(WAVELET.pack(data=w, color=cfg_color, ctrl=0)) for w in words]


def config_write(target, position, rx, tx, *, last, hops=0):
    """Data word of a configuration wavelet that writes one switch position of ``target``."""
    if not 0 <= position <= last < MAX_POSITIONS:
        raise ValueError(f"Switch position must satisfy 0 <= position <= last < {MAX_POSITIONS},"
                         f" not position={position!r}, last={last!r}")
    return int(CONFIG.pack(op=ConfigOp.WRITE_ROUTE, target=target, position=position,
                           last=last, rx=Direction.mask(rx), tx=Direction.mask(tx),
                           hops=integer("hops", hops, 0, MAX_HOPS)))


def config_switch(target, cmd, *, hops=0):
    """Data word of a configuration wavelet that applies switch command ``cmd`` to ``target``."""
    cmd = ControlOp(cmd)
    if cmd not in (ControlOp.NOP, ControlOp.ADVANCE, ControlOp.RESET, ControlOp.TEARDOWN):
        raise ValueError(f"Switch command must be NOP, ADVANCE, RESET or TEARDOWN, not {cmd!r}")
    return int(CONFIG.pack(op=ConfigOp.SWITCH, target=target, cmd=cmd,
                           hops=integer("hops", hops, 0, MAX_HOPS)))
