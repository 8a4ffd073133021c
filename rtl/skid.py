"""A stream stage that cuts a combinational path: a register stage (every output a register,
one cycle later)."""

from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["RegisterStage"]


class RegisterStage(wiring.Component):
    """One-cycle stream stage whose outputs are all registers, at full rate.

    ``o.valid`` and ``o.payload`` are an output register, ``i.ready`` is a flip-flop: a word
    taken on ``i`` in one cycle is offered on ``o`` from the next, one a cycle while ``o``
    takes them. When ``o`` holds its word back, a spare entry keeps the word ``i`` hands over
    in that cycle and ``i.ready`` goes low until the output register has taken it. So no
    combinational path crosses the stage in either direction, apart from ``o.ready`` into the
    registers' enables. Order is kept and nothing is lost or duplicated.

    The serial bridge puts one between each row FIFO and its intake (``docs/bridge.md``): the
    intake's arrival logic (its route lookup) then starts at a flip-flop, not behind the FIFO's
    block RAM and a multiplexer.

    Parameters
    ----------
    shape : shape-like
        The payload.

    Members
    -------
    i : In(stream.Signature(shape))
    o : Out(stream.Signature(shape))
    busy : Out(1)
        The stage holds a word (offered on ``o`` or in the spare).
    """

    def __init__(self, shape):
        self.shape = shape
        super().__init__({
            "i": In(stream.Signature(shape)),
            "o": Out(stream.Signature(shape)),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        spare, full = Signal(self.shape), Signal()
        m.d.comb += [self.i.ready.eq(~full), self.busy.eq(self.o.valid | full)]
        with m.If(~self.o.valid | self.o.ready):
            with m.If(full):
                m.d.sync += [self.o.payload.eq(spare), self.o.valid.eq(1), full.eq(0)]
            with m.Else():
                m.d.sync += [self.o.payload.eq(self.i.payload), self.o.valid.eq(self.i.valid)]
        with m.Elif(self.i.valid & ~full):
            m.d.sync += [spare.eq(self.i.payload), full.eq(1)]
        return m
