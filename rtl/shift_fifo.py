"""A first-word-fall-through FIFO whose head is always its first register."""

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .validate import count

__all__ = ["ShiftFIFO"]


class ShiftFIFO(wiring.Component):
    """Drop-in for ``amaranth.lib.fifo.SyncFIFO`` (the members the router uses), built as a
    shift register: entry 0 is the head, a read moves every entry one place down, a write
    lands at the first free place.

    Cycle for cycle the same as ``SyncFIFO(width, depth)`` on ``w_rdy`` (not full), ``r_rdy``
    (not empty), ``level`` and ``r_data`` while ``r_rdy``; only ``r_data`` of an empty FIFO
    differs (``SyncFIFO`` shows a stale entry, this one its old head). It has no read
    multiplexer: on an iCE40, whose logic cells pair each flip-flop with the LUT in front of it,
    a 2-deep queue costs two cells a bit instead of three. Where distributed RAM exists (ECP5),
    ``SyncFIFO`` is the cheaper one for deeper queues.

    Latency: a write is at the head the next cycle. Throughput: a write and a read every cycle
    (when not full: like ``SyncFIFO``, a full FIFO takes no write even while it is read).
    """

    def __init__(self, *, width, depth):
        depth = count("depth", depth)
        self.width, self.depth = width, depth
        super().__init__({
            "w_data": In(width), "w_en": In(1), "w_rdy": Out(1),
            "r_data": Out(width), "r_en": In(1), "r_rdy": Out(1),
            "level": Out(range(depth + 1)),
        })

    def elaborate(self, platform):
        m = Module()
        D = self.depth
        entries = [Signal(self.width, name=f"entry{k}") for k in range(D)]
        m.d.comb += [
            self.w_rdy.eq(self.level != D),
            self.r_rdy.eq(self.level != 0),
            self.r_data.eq(entries[0]),
        ]
        do_read = self.r_rdy & self.r_en
        do_write = self.w_rdy & self.w_en
        place = Signal(range(D + 1))        # where a write lands this cycle
        m.d.comb += place.eq(self.level - do_read)
        for k in range(D):
            with m.If(do_write & (place == k)):
                m.d.sync += entries[k].eq(self.w_data)
            if k + 1 < D:
                with m.Elif(do_read):
                    m.d.sync += entries[k].eq(entries[k + 1])
        m.d.sync += self.level.eq(self.level + do_write - do_read)
        return m
