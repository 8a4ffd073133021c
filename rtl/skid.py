"""A skid buffer: a stream stage that passes words straight through but whose ``ready`` is a
register, so that no combinational path crosses it from ``o.ready`` to ``i.ready``."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["SkidBuffer"]


class SkidBuffer(wiring.Component):
    """Zero-latency stream stage with one spare entry and a registered ``i.ready``.

    While the spare is empty, ``o`` shows ``i`` as it is (no cycle added) and ``i.ready`` is
    high. When ``o`` refuses a word that ``i`` hands over, the spare keeps it: ``o`` then shows
    the spare until it is taken, and ``i.ready`` is low meanwhile. So ``i.ready`` is a
    flip-flop, ``o.valid`` and ``o.payload`` do not depend on ``o.ready``, and the stage holds
    at most one word. Order is kept and nothing is lost or duplicated.

    The tile puts one on each mesh output that leads to another tile (``docs/router.md``,
    "Skid buffers at the mesh ports"): a neighbour's ``ready`` (which depends on the color it
    is offered) then stops at this register instead of running on through the router's
    allocator.

    Parameters
    ----------
    shape : shape-like
        The payload.

    Members
    -------
    i : In(stream.Signature(shape))
    o : Out(stream.Signature(shape))
    full : Out(1)
        The spare holds a word.
    """

    def __init__(self, shape):
        self.shape = shape
        super().__init__({
            "i": In(stream.Signature(shape)),
            "o": Out(stream.Signature(shape)),
            "full": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        spare = Signal(self.shape)
        m.d.comb += [
            self.i.ready.eq(~self.full),
            self.o.valid.eq(self.full | self.i.valid),
            self.o.payload.eq(Mux(self.full, spare, self.i.payload)),
        ]
        with m.If(self.full):
            with m.If(self.o.ready):
                m.d.sync += self.full.eq(0)
        with m.Elif(self.i.valid & ~self.o.ready):
            m.d.sync += [self.full.eq(1), spare.eq(self.i.payload)]
        return m
