"""Formal spec of the router's route state, :class:`~rtl.route_state.RouteState`: the walk
after reset, the update engine (route writes, ``ADVANCE``, ``RESET``, ``TEARDOWN``) and the
per-port route copies the inputs read.

Reduced: two colors, strapped (position 0 of each color an arbitrary constant, the other
positions empty, as a mesh tile's). Every input's update stream is free: any update (a color
below ``n_colors``, as the inputs hand them), offered at any time, kept until taken. The spec
keeps its own route state: per color four positions (``rx``, ``tx``), the current and last
position and the torn flag; an update taken in cycle ``k`` changes it as the rules say
(``docs/router.md``) and is seen by lookups from cycle ``k + 2``. Checked in every cycle up
to the depth:

- ``ready`` rises after the walk (``n_colors`` cycles) and stays; no update is taken before;
- at most one update is taken a cycle, and only one offered;
- every lookup (``arrive`` and ``head`` of each port, any color) answers the model's route of
  that color: ``accept`` the port's bit of the current position's ``rx``, its ``tx``, and
  the torn flag (a color outside the table: no route).
"""

from amaranth.asserts import AnyConst, AnySeq
from amaranth.hdl import (
    Array,
    Assert,
    Assume,
    Cat,
    Cover,
    Elaboratable,
    Module,
    Mux,
    ResetSignal,
    Signal,
)
from amaranth.lib import data

from wse.rtl.isa import route_straps_layout
from wse.rtl.wavelet import ControlOp, Direction

__all__ = ["RouteStateSpec"]

POSITIONS = 4


class _Route(data.Struct):
    rx: 5
    tx: 5


class RouteStateSpec(Elaboratable):
    """``module`` is ``wse.rtl.route_state`` or a mutant of it."""

    def __init__(self, module, *, n_colors=2):
        self.module, self.n_colors = module, n_colors

    def elaborate(self, platform):
        m = Module()
        n = self.n_colors
        ports = list(Direction)
        dut = m.submodules.dut = self.module.RouteState(n_colors=n, straps=True)
        m.d.comb += Assume(~ResetSignal())
        strap = Signal(route_straps_layout(n))
        m.d.comb += [strap.as_value().eq(AnyConst(len(strap.as_value()))),
                     dut.route_init.as_value().eq(strap.as_value())]

        # Updates: free, kept until taken.
        taken = []
        for j in range(len(ports)):
            u = dut.updates[j]
            m.d.comb += [u.valid.eq(AnySeq(1)), u.payload.as_value().eq(
                AnySeq(len(u.payload.as_value()))), Assume(u.payload.color < n)]
            was_valid = Signal(name=f"u{j}_was_valid")
            was = Signal.like(u.payload, name=f"u{j}_was")
            m.d.sync += [was_valid.eq(u.valid & ~u.ready), was.eq(u.payload)]
            with m.If(was_valid):
                m.d.comb += Assume(u.valid & (u.payload.as_value() == was.as_value()))
            taken.append(u.valid & u.ready)
        m.d.comb += Assert(sum(taken) <= 1)

        # The model.
        pos = [[Signal(_Route, name=f"c{c}_pos{k}") for k in range(POSITIONS)] for c in range(n)]
        cur = [Signal(2, name=f"c{c}_cur") for c in range(n)]
        last = [Signal(2, name=f"c{c}_last") for c in range(n)]
        torn = [Signal(name=f"c{c}_torn") for c in range(n)]
        cycles = Signal(range(n + 2))
        with m.If(cycles != n + 1):
            m.d.sync += cycles.eq(cycles + 1)
        walked = cycles >= n
        m.d.comb += Assert(dut.ready == walked)
        for c in range(n):
            with m.If(cycles == 0):
                m.d.sync += pos[c][0].eq(strap[c])
        upd_valid = Signal()
        upd = Signal.like(dut.updates[0].payload)
        for j in range(len(ports)):
            with m.If(taken[j]):
                m.d.comb += [upd_valid.eq(1), upd.eq(dut.updates[j].payload),
                             Assert(walked)]
        stage_valid = Signal()
        stage = Signal.like(upd)
        m.d.sync += [stage_valid.eq(upd_valid), stage.eq(upd)]
        for c in range(n):
            with m.If(stage_valid & (stage.color == c)):
                with m.If(stage.write):
                    m.d.sync += [Array(pos[c])[stage.position].eq(Cat(stage.rx, stage.tx)),
                                 last[c].eq(stage.last)]
                with m.Elif(stage.cmd == ControlOp.ADVANCE):
                    m.d.sync += cur[c].eq(Mux(cur[c] >= last[c], 0, cur[c] + 1))
                with m.Elif(stage.cmd == ControlOp.RESET):
                    m.d.sync += [cur[c].eq(0), torn[c].eq(0)]
                with m.Elif(stage.cmd == ControlOp.TEARDOWN):
                    m.d.sync += torn[c].eq(1)

        # Every lookup answers the model.
        index_bits = max((n - 1).bit_length(), 1)
        for port in ports:
            for look in (dut.arrive[port.value], dut.head[port.value]):
                m.d.comb += look.color.eq(AnySeq(5))
                known = look.color < n
                index = look.color[:index_bits]
                route = Array(Array(pos[c])[cur[c]] for c in range(n))[index]
                with m.If(walked):
                    m.d.comb += [
                        Assert(look.route.accept == (known & route.rx.bit_select(port.value, 1))),
                        Assert(look.route.tx == Mux(known, route.tx, 0)),
                        Assert(look.route.torn == (known & Array(torn)[index])),
                    ]

        # Covers: a color advanced past a written position and wrapped; torn and reopened.
        wrapped = Signal()
        reopened = Signal()
        with m.If(stage_valid & ~stage.write & (stage.cmd == ControlOp.ADVANCE) &
                  (cur[0] != 0) & (cur[0] >= last[0]) & (stage.color == 0)):
            m.d.sync += wrapped.eq(1)
        with m.If(stage_valid & ~stage.write & (stage.cmd == ControlOp.RESET) & torn[0] &
                  (stage.color == 0)):
            m.d.sync += reopened.eq(1)
        m.d.comb += [Cover(wrapped), Cover(reopened & (pos[0][0].tx != strap[0].tx))]
        return m
