"""Tracing colors through route tables, and the channel dependency graph of the router queues:
the machinery :meth:`fabric.routes.ColorPlan.check` proves a color plan with."""

from dataclasses import dataclass

from wse.rtl.wavelet import Direction

__all__ = ["RoutePlanError", "Flow", "trace", "find_cycle", "dependency_graph", "edge_port",
           "where"]

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


def where(place):
    kind, *rest = place
    if kind == "core":
        return f"core ({rest[0]},{rest[1]})"
    return f"{ {'N': 'north', 'E': 'east', 'S': 'south', 'W': 'west'}[rest[0]]} edge port {rest[1]}"


def edge_port(rows, cols, r, c, d):
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
            edge = edge_port(rows, cols, r, c, d)
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


def dependency_graph(flows, hops_of, rows, cols, queue_of, bypassed=None):
    """The channel dependency graph of the router queues: node ``(r, c, in_port, queue)``; an
    edge means a wavelet at that queue's head can wait for room in the next one. Cores and edge
    ports are sinks: a core takes every class on its own FIFO (the ramp offers only what the core
    promised to take, and an input moves on to its other queue while a head waits) and the host
    drains the outlets. ``bypassed(r, c, in_port, color)`` says which arrivals skip the router
    into the core (a tile's psums): sinks too, never in a queue."""
    graph = {}
    for flow in flows:
        for r, c, port, d in hops_of[flow]:
            if bypassed and bypassed(r, c, port, flow.color):
                continue
            node = (r, c, port.name, queue_of(r, c, flow.color))
            graph.setdefault(node, {})
            if d == Direction.R or edge_port(rows, cols, r, c, d) is not None:
                continue
            dr, dc = _STEP[d]
            if bypassed and bypassed(r + dr, c + dc, d.opposite, flow.color):
                continue
            nxt = (r + dr, c + dc, d.opposite.name, queue_of(r + dr, c + dc, flow.color))
            graph[node].setdefault(nxt, f"{flow.what} (color {flow.color}) going {d.name}")
            graph.setdefault(nxt, {})
    return graph
