"""Random route tables and traffic for router tests: reproducible from a seed, always unambiguous.

Colors are split in two kinds so the reference model has one right answer (see
:mod:`tb.router_model`): *shared* colors have one fixed position and may come from any input;
*owned* colors belong to one input, have up to four positions, and move between them with
``ADVANCE`` / ``RESET`` control wavelets. Some colors have no route and some routes refuse some
inputs, so drops are exercised too. Every wavelet carries a unique id in its data bits.
"""

import random
from dataclasses import dataclass, field

from wse.rtl.route_table import MAX_POSITIONS, RouteTable
from wse.rtl.wavelet import CONTROL, WAVELET, ControlOp, Direction

__all__ = ["Traffic", "random_table", "random_traffic"]

_ALL = (1 << len(Direction)) - 1


@dataclass
class Traffic:
    table: RouteTable
    owner: dict                      # owned color -> input Direction
    streams: dict = field(default_factory=dict)   # Direction -> [word]

    @property
    def count(self):
        return sum(len(words) for words in self.streams.values())


def random_table(rng, n_colors=24, *, unrouted=2, owned=8):
    """A random table: ``unrouted`` colors without a route, ``owned`` colors with one owner."""
    colors = list(range(n_colors))
    rng.shuffle(colors)
    owned_colors = colors[unrouted:unrouted + owned]
    shared_colors = colors[unrouted + owned:]
    table = RouteTable(n_colors)
    owner = {}
    for color in shared_colors:
        rx = _ALL if rng.random() < 0.7 else rng.randrange(1, _ALL + 1)
        table[color] = [(rx, rng.randrange(1, _ALL + 1))]
    for color in owned_colors:
        port = rng.choice(list(Direction))
        owner[color] = port
        positions = []
        for _ in range(rng.randrange(1, MAX_POSITIONS + 1)):
            rx = port.bit if rng.random() < 0.9 else _ALL & ~port.bit
            positions.append((rx | rng.randrange(0, _ALL + 1), rng.randrange(1, _ALL + 1)))
            if rng.random() < 0.1:
                positions[-1] = (positions[-1][0] & ~port.bit, positions[-1][1])
        table[color] = positions
    return table, owner


def random_traffic(seed, count, *, n_colors=24, ctrl_fraction=0.1, switch_fraction=0.05,
                   uid_start=1):
    """``count`` wavelets spread over the five inputs, with a fresh random table."""
    rng = random.Random(seed)
    table, owner = random_table(rng, n_colors)
    traffic = Traffic(table=table, owner=owner, streams={d: [] for d in Direction})
    shared = [c for c in range(n_colors) if c not in owner]
    uid = uid_start
    for _ in range(count):
        port = rng.choice(list(Direction))
        mine = [c for c, p in owner.items() if p == port]
        color = rng.choice(shared + mine * 2)
        roll = rng.random()
        if color in owner and roll < switch_fraction:
            op = rng.choice([ControlOp.ADVANCE, ControlOp.ADVANCE, ControlOp.RESET])
            word = WAVELET.pack(data=CONTROL.pack(op=op, arg=uid), color=color, ctrl=1)
        elif roll < switch_fraction + ctrl_fraction:
            op = rng.choice([ControlOp.NOP, ControlOp.CR, ControlOp.ADDR])
            word = WAVELET.pack(data=CONTROL.pack(op=op, arg=uid), color=color, ctrl=1)
        else:
            word = WAVELET.pack(data=uid, color=color, ctrl=0)
        traffic.streams[port].append(int(word))
        uid += 1
    return traffic
