"""The core's input sorter: wavelets from the ramp and psums from the neighbours into FIFOs."""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from .core_params import CoreParams
from .isa import core_strap_layout
from .peek_fifo import PeekFIFO, PeekSignature
from .validate import integer
from .wavelet import ControlOp, ControlPayload, Wavelet

__all__ = ["InputSorter"]


class InputSorter(wiring.Component):
    """Sorts what the core takes by class (``docs/pe.md``, "Input classes" and "Selection").

    A wavelet on ``i`` of color ``psum_from_n`` or ``psum_from_s`` goes, as its 32 data bits,
    into that color's psum FIFO; every other color into the command FIFO, in order (a foreign
    color is dropped at dispatch, not here), except on ``cmd``: a SELECT control wavelet sets
    the selected column (column 0 after reset) and goes no further, and while another column
    is selected every ``cmd`` wavelet is taken and discarded, whether the command FIFO has
    room or not: the cores a row's commands are not for never hold the row up.
    ``psum_n_in`` / ``psum_s_in`` (the tile's bypass) write the same psum FIFOs with priority
    over the ramp: ``i`` takes a psum only in a cycle when its bypass offers none. A wavelet a
    cycle on each of the three inputs, at once.

    Latency: an entry written in one cycle is at the FIFO's head in the next; a SELECT taken in
    one cycle decides the fate of the ``cmd`` wavelet taken in the next. Bad input: none (every
    color has a FIFO; a SELECT of a column no core has selects none).

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
    accept : Out(4)
        What ``i`` would take this cycle: bit 0 a command of any color but ``cmd`` and the psum
        colors (``weight``, foreign colors), bit 1 ``psum_from_n``, bit 2 ``psum_from_s``,
        bit 3 ``cmd`` (always, while another column is selected).
    taken : Out(range(4))
        Wavelets kept this cycle, over the three inputs (SELECTs and discarded ``cmd``
        wavelets are not: ``wavelets_in`` counts what the core keeps).
    cmd : Out(PeekSignature(Wavelet))
        The command FIFO's first two entries.
    psum_n, psum_s : Out(stream.Signature(32))
        The psum FIFOs' heads, in arrival order.
    strap : In(core_strap_layout(rows, cols))
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
            "accept":    Out(4),
            "taken":     Out(range(4)),
            "cmd":       Out(PeekSignature(Wavelet)),
            "psum_n":    Out(stream.Signature(32)),
            "psum_s":    Out(stream.Signature(32)),
        }
        if self.straps:
            members["strap"] = In(core_strap_layout(params.rows, params.cols))
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

        p = self.params
        col = self.strap.col if self.straps else p.col
        color = self.i.payload.color
        to_n, to_s = color == colors.psum_from_n, color == colors.psum_from_s
        to_cmd = ~to_n & ~to_s          # foreign colors too: dropped in order, at dispatch

        # Selection: the column last selected (its low bits and whether any higher bit is set)
        width = data.Layout.cast(core_strap_layout(p.rows, p.cols))["col"].width
        sel_col, sel_far = Signal(width), Signal()
        selected = ~sel_far & (sel_col == col)
        control = data.View(ControlPayload, self.i.payload.data)
        arg = control.arg
        is_cmd = color == colors.cmd
        is_select = is_cmd & self.i.payload.ctrl & (control.op == ControlOp.SELECT)
        discard = is_cmd & (is_select | ~selected)
        cmd_room = cmdq.w.ready | ~selected
        with m.If(self.i.valid & self.i.ready & is_select):
            m.d.sync += [sel_col.eq(arg[:width]), sel_far.eq(arg[width:].any())]
        m.d.comb += [cmdq.w.payload.eq(self.i.payload),
                     cmdq.w.valid.eq(self.i.valid & to_cmd & ~discard)]
        room = []
        for fifo, direct, ramp in ((pnq, self.psum_n_in, to_n), (psq, self.psum_s_in, to_s)):
            room.append(fifo.w_rdy & ~direct.valid)
            m.d.comb += [
                direct.ready.eq(fifo.w_rdy),
                fifo.w_data.eq(Mux(direct.valid, direct.payload, self.i.payload.data)),
                fifo.w_en.eq(direct.valid | (self.i.valid & ramp)),
            ]
        m.d.comb += [
            self.i.ready.eq(Mux(to_cmd, Mux(is_cmd, cmd_room, cmdq.w.ready),
                                Mux(to_n, room[0], room[1]))),
            self.accept.eq(Cat(cmdq.w.ready, room[0], room[1], cmd_room)),
        ]
        taken = Cat(self.i.valid & self.i.ready & ~discard,
                    self.psum_n_in.valid & self.psum_n_in.ready,
                    self.psum_s_in.valid & self.psum_s_in.ready)
        m.d.comb += self.taken.eq(taken[0] + taken[1] + taken[2])
        return m
