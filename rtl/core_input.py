"""The core's input sorter: wavelets from the ramp and psums from the neighbours into FIFOs."""

from amaranth.hdl import Cat, Module, Mux
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from .core_params import CoreParams
from .isa import core_strap_layout
from .peek_fifo import PeekFIFO, PeekSignature
from .validate import integer
from .wavelet import Wavelet

__all__ = ["InputSorter"]


class InputSorter(wiring.Component):
    """Sorts what the core takes by class (``docs/pe.md``, "Input classes").

    A wavelet on ``i`` of color ``psum_from_n`` or ``psum_from_s`` goes, as its 32 data bits,
    into that color's psum FIFO; every other color into the command FIFO, in order (a foreign
    color is dropped at dispatch, not here). ``psum_n_in`` / ``psum_s_in`` (the tile's bypass)
    write the same psum FIFOs with priority over the ramp: ``i`` takes a psum only in a cycle
    when its bypass offers none. A wavelet a cycle on each of the three inputs, at once.

    Latency: an entry written in one cycle is at the FIFO's head in the next. Bad input: none
    (every color has a FIFO).

    Parameters
    ----------
    params : CoreParams
    cmd_depth, psum_depth : int
        Entries of the command FIFO and of each psum FIFO (at least 2).
    straps : bool
        The psum colors from ``strap`` instead of ``params.colors``.

    Members
    -------
    i : In(stream.Signature(Wavelet))
        From the router's ramp; ``ready`` depends on the offered color.
    psum_n_in, psum_s_in : In(stream.Signature(32))
        Psums straight from the north and south neighbours.
    accept : Out(3)
        What ``i`` would take this cycle: bit 0 a command, bit 1 ``psum_from_n``, bit 2
        ``psum_from_s``.
    taken : Out(range(4))
        Wavelets taken this cycle, over the three inputs.
    cmd : Out(PeekSignature(Wavelet))
        The command FIFO's first two entries.
    psum_n, psum_s : Out(stream.Signature(32))
        The psum FIFOs' heads, in arrival order.
    strap : In(core_strap_layout(rows))
        Only with ``straps=True``.
    """

    def __init__(self, params, *, cmd_depth=4, psum_depth=4, straps=False):
        if not isinstance(params, CoreParams):
            raise TypeError(f"params must be a CoreParams, not {params!r}")
        self.params = params
        self.cmd_depth = integer("cmd_depth", cmd_depth, 2)
        self.psum_depth = integer("psum_depth", psum_depth, 2)
        self.straps = bool(straps)
        members = {
            "i":         In(stream.Signature(Wavelet)),
            "psum_n_in": In(stream.Signature(32)),
            "psum_s_in": In(stream.Signature(32)),
            "accept":    Out(3),
            "taken":     Out(range(4)),
            "cmd":       Out(PeekSignature(Wavelet)),
            "psum_n":    Out(stream.Signature(32)),
            "psum_s":    Out(stream.Signature(32)),
        }
        if self.straps:
            members["strap"] = In(core_strap_layout(params.rows))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        colors = self.strap if self.straps else self.params.colors
        cmdq = m.submodules.cmd_fifo = PeekFIFO(Wavelet, self.cmd_depth)
        pnq = m.submodules.psum_n_fifo = SyncFIFO(width=32, depth=self.psum_depth)
        psq = m.submodules.psum_s_fifo = SyncFIFO(width=32, depth=self.psum_depth)
        wiring.connect(m, cmdq.r, wiring.flipped(self.cmd))
        wiring.connect(m, pnq.r_stream, wiring.flipped(self.psum_n))
        wiring.connect(m, psq.r_stream, wiring.flipped(self.psum_s))

        color = self.i.payload.color
        to_n, to_s = color == colors.psum_from_n, color == colors.psum_from_s
        to_cmd = ~to_n & ~to_s          # foreign colors too: dropped in order, at dispatch
        m.d.comb += [cmdq.w.payload.eq(self.i.payload), cmdq.w.valid.eq(self.i.valid & to_cmd)]
        room = []
        for fifo, direct, ramp in ((pnq, self.psum_n_in, to_n), (psq, self.psum_s_in, to_s)):
            room.append(fifo.w_rdy & ~direct.valid)
            m.d.comb += [
                direct.ready.eq(fifo.w_rdy),
                fifo.w_data.eq(Mux(direct.valid, direct.payload, self.i.payload.data)),
                fifo.w_en.eq(direct.valid | (self.i.valid & ramp)),
            ]
        m.d.comb += [
            self.i.ready.eq(Mux(to_cmd, cmdq.w.ready, Mux(to_n, room[0], room[1]))),
            self.accept.eq(Cat(cmdq.w.ready, room[0], room[1])),
        ]
        taken = Cat(self.i.valid & self.i.ready, self.psum_n_in.valid & self.psum_n_in.ready,
                    self.psum_s_in.valid & self.psum_s_in.ready)
        m.d.comb += self.taken.eq(taken[0] + taken[1] + taken[2])
        return m
