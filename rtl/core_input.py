"""The core's input sorter: wavelets from the ramp and psums from the neighbours into FIFOs."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .core_params import CoreParams
from .core_rows import RowSplit, below
from .isa import (
    CR_O_BITS,
    ONES_SLOT,
    CrArg,
    MaskArg,
    WeightPayload,
    core_strap_layout,
    cr_job_layout,
)
from .peek_fifo import LutFIFO, PeekFIFO, PeekSignature
from .validate import integer
from .wavelet import ControlOp, ControlPayload, Wavelet

__all__ = ["COMMAND", "DROPPED_OP", "ONES_OP", "SKIP_OP", "CommandDecode", "InputSorter",
           "command_held_layout", "cr_ahead_layout"]

#: An entry of the command FIFO: the wavelet, its color as the dispatcher needs it (``cmd``,
#: ``weight``, or neither: a foreign color).
COMMAND = data.StructLayout({"data": 32, "ctrl": 1, "is_cmd": 1, "is_weight": 1})


#: The ``op`` the held part gives an entry the dispatcher only drops as an error (no
#: :class:`~rtl.wavelet.ControlOp` has it: it takes the unknown opcode's branch).
DROPPED_OP = 15
#: The ``op`` the held part gives a carriage return with ``skip`` that takes effect (CR, CR_OUT,
#: CR_ACT or CR_DELTA alike: it hands no buffer over, so it needs no job and never waits for a
#: buffer).
SKIP_OP = 14
#: The ``op`` the held part gives an AXPY of :data:`~rtl.isa.ONES_SLOT` (an AXPY's ``op`` bits
#: are its slot's top bits, otherwise unused: no bit more in the held part for it).
ONES_OP = 13
assert not {DROPPED_OP, SKIP_OP, ONES_OP} & {o.value for o in ControlOp}


def command_held_layout(params):
    """What the dispatcher decides a command's first cycle from, kept in flip-flops while its
    entry is the command FIFO's head (``PeekFIFO``'s ``held`` part): the entry's class (``ctrl``,
    ``is_weight``), a control wavelet's ``op``, an AXPY's ``slot`` as the lanes' feature index, and
    whether the value (an AXPY's weight, a LOAD's operand) is zero. An AXPY of
    :data:`~rtl.isa.ONES_SLOT` is held with the ``op`` :data:`ONES_OP` and slot 0. An entry that is
    only dropped as an error (a foreign color, an AXPY whose slot is outside ``X`` and not the ones
    slot, a CR of this row with a result slot outside ``Y``, a CR_ACT or CR_DELTA of this row with
    one outside ``X``) is held as a control wavelet of opcode :data:`DROPPED_OP`: the same cycle as
    an unknown opcode (a pop, busy, an error), and 12 bits, 3 LUT-RAM cells a copy instead of 4 on
    the ECP5. A carriage return with ``skip`` (not dropped) is held as opcode :data:`SKIP_OP`, so
    the dispatcher knows it from flip-flops too; a CR_ACT or CR_DELTA of another row as a CR (it is
    one there)."""
    return data.StructLayout({"ctrl": 1, "is_weight": 1, "op": ControlOp,
                              "slot": range(params.n_feat), "zero": 1})


def cr_ahead_layout(rows, n_out, n_feat):
    """What the dispatcher sees of the command behind the one it runs: whether it is a carriage
    return (CR, CR_OUT, CR_ACT or CR_DELTA, on ``cmd`` or ``weight``) that takes effect (not a CR of
    this row whose result slot ``o // rows`` is outside ``Y``, ``o >= n_out * rows``, nor a CR_ACT
    or CR_DELTA of this row whose slot is outside ``X``, ``o >= n_feat * rows``: errors) and hands
    its buffer over (``hand``) or, with ``skip``, hands none (``free``), and its job
    (:func:`~rtl.isa.cr_job_layout`)."""
    return data.StructLayout({"hand": 1, "free": 1,
                              "job": cr_job_layout(rows, n_out, n_feat)})


class InputSorter(wiring.Component):
    """Sorts what the core takes by class (``docs/pe.md``, "Input classes" and "Selection").

    A wavelet on ``i`` of color ``psum_from_n`` or ``psum_from_s`` goes, as its 32 data bits,
    into that color's psum FIFO; every other color into the command FIFO, in order (a foreign
    color is dropped at dispatch, not here), except on ``cmd``: a SELECT control wavelet sets
    the selected column (column 0 after reset) and goes no further, and while another column
    is selected every ``cmd`` wavelet is taken and discarded, whether the command FIFO has
    room or not: the cores a row's commands are not for never hold the row up. A MASK on
    ``cmd`` or ``weight`` whose ``col`` is not the core's is taken and discarded too (after the
    rule above on ``cmd``); it waits for room in the command FIFO like any word of its color
    would (``accept`` looks at colors, not at payloads, so the router would not offer it
    earlier anyway): timing only, it never enters the FIFO.
    ``psum_n_in`` / ``psum_s_in`` (the tile's bypass) write the same psum FIFOs with priority
    over the ramp: ``i`` takes a psum only in a cycle when its bypass offers none (with
    ``registered_ramp`` the other way round: ``i`` always takes its word, the bypass waits).
    A wavelet a cycle on each of the three inputs, at once.

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
    held_copies : int
        The command FIFO's copies of its held parts (:class:`~rtl.peek_fifo.PeekFIFO`): 1 or
        2, the same commands in the same cycles.
    ramp_psums : bool
        Whether psums may come on ``i`` at all. A tile's come only on its bypass (its routes
        never send a psum color to the ramp, and a psum color arriving on ``i_n`` / ``i_s``
        skips the router), so a tile turns this off: a psum color on ``i`` is then a foreign
        one (dropped at dispatch, an error), the psum FIFOs are written by the bypass alone
        and ``accept`` answers for the psum colors as for any other command (bits 1 and 2 equal
        bit 0). The tile's ramp is then answered by two classes instead of four, and the two
        32-bit multiplexers in front of the psum FIFOs go (the area: ``docs/fpga.md``).
    registered_ramp : bool
        The ramp ends in the router's output register: what the router grants in one cycle is
        offered on ``i`` in the next, so ``accept`` is a promise for the next cycle, on top of
        the word on ``i`` now, and ``i.ready`` is always 1 (whatever is offered on ``i`` was
        promised: the source must offer nothing else). A word on ``i`` that enters the command
        FIFO then needs two free entries for the next to be accepted, a SELECT on ``i`` decides
        the next ``cmd`` wavelet's fate, and a psum is accepted only while its FIFO is empty;
        a psum on ``i`` goes into its FIFO before the bypass's (the tile's psums take the
        bypass: ramp psums are rare).

    Members
    -------
    i : In(stream.Signature(Wavelet))
        From the router's ramp; ``ready`` depends on the offered color (always 1 with
        ``registered_ramp``).
    psum_n_in, psum_s_in : In(stream.Signature(32))
        Psums straight from the north and south neighbours.
    accept : Out(4)
        What ``i`` would take this cycle (with ``registered_ramp``: in the next, after the word
        on ``i`` now): bit 0 a command of any color but ``cmd`` and the psum colors
        (``weight``, foreign colors), bit 1 ``psum_from_n``, bit 2 ``psum_from_s``, bit 3
        ``cmd`` (always, while another column is selected).
    taken : Out(3)
        Which inputs gave a wavelet the core keeps this cycle: bit 0 ``i``, 1 ``psum_n_in``,
        2 ``psum_s_in`` (SELECTs, discarded ``cmd`` wavelets and other columns' MASKs are not
        kept: ``wavelets_in`` counts what the core keeps).
    cmd : Out(PeekSignature(COMMAND, cr_ahead_layout(rows, n_out, n_feat),
        command_held_layout(params)))
        The command FIFO's head, what the dispatcher needs of the entry behind it, and the
        head's :func:`command_held_layout` part in flip-flops (both worked out here, as the
        entry is written: no second copy of the entry).
    psum_n, psum_s : Out(stream.Signature(32))
        The psum FIFOs' heads, in arrival order.
    strap : In(core_strap_layout(rows, cols))
        Only with ``straps=True``.
    """

    def __init__(self, params, *, cmd_depth=4, psum_depth=4, straps=False,
                 registered_ramp=False, held_copies=1, ramp_psums=True):
        if not isinstance(params, CoreParams):
            raise TypeError(f"params must be a CoreParams, not {params!r}")
        self.params = params
        self.registered_ramp = bool(registered_ramp)
        self.ramp_psums = bool(ramp_psums)
        self.cmd_depth = integer("cmd_depth", cmd_depth, 2)
        self.psum_depth = integer("psum_depth", psum_depth, 2)
        self.held_copies = integer("held_copies", held_copies, 1, 2)
        self.straps = bool(straps)
        members = {
            "i":         In(stream.Signature(Wavelet)),
            "psum_n_in": In(stream.Signature(32)),
            "psum_s_in": In(stream.Signature(32)),
            "accept":    Out(4),
            "taken":     Out(3),
            "cmd":       Out(PeekSignature(COMMAND, cr_ahead_layout(params.rows, params.n_out,
                                                                       params.n_feat),
                                           command_held_layout(params))),
            "psum_n":    Out(stream.Signature(32)),
            "psum_s":    Out(stream.Signature(32)),
        }
        if self.straps:
            members["strap"] = In(core_strap_layout(params.rows, params.cols))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        colors = self.strap if self.straps else self.params.colors
        p = self.params
        cmdq = m.submodules.cmd_fifo = PeekFIFO(COMMAND, self.cmd_depth,
                                                cr_ahead_layout(p.rows, p.n_out, p.n_feat),
                                                command_held_layout(p),
                                                held_copies=self.held_copies)
        pnq = m.submodules.psum_n_fifo = LutFIFO(32, self.psum_depth)
        psq = m.submodules.psum_s_fifo = LutFIFO(32, self.psum_depth)
        wiring.connect(m, cmdq.r, wiring.flipped(self.cmd))
        wiring.connect(m, pnq.r, wiring.flipped(self.psum_n))
        wiring.connect(m, psq.r, wiring.flipped(self.psum_s))

        col = self.strap.col if self.straps else p.col
        color = self.i.payload.color
        if self.ramp_psums:
            to_n, to_s = color == colors.psum_from_n, color == colors.psum_from_s
        else:       # a tile's psums take its bypass: on the ramp a psum color is a foreign one
            to_n = to_s = Const(0)
        to_cmd = ~to_n & ~to_s          # foreign colors too: dropped in order, at dispatch

        # Selection: the column last selected (its low bits and whether any higher bit is set)
        width = data.Layout.cast(core_strap_layout(p.rows, p.cols))["col"].width
        sel_col, sel_far = Signal(width), Signal()
        selected = ~sel_far & (sel_col == col)
        control = data.View(ControlPayload, self.i.payload.data)
        arg = control.arg
        is_cmd = color == colors.cmd
        is_select = is_cmd & self.i.payload.ctrl & (control.op == ControlOp.SELECT)
        is_weight = color == colors.weight
        # another column's MASK (6-bit ``col`` against the core's, zero-extended)
        other_mask = ((is_cmd | is_weight) & self.i.payload.ctrl
                      & (control.op == ControlOp.MASK) & (data.View(MaskArg, arg).col != col))
        discard = (is_cmd & (is_select | ~selected)) | other_mask
        cmd_room = cmdq.w.ready | ~selected
        with m.If(self.i.valid & self.i.ready & is_select):
            m.d.sync += [sel_col.eq(arg[:width]), sel_far.eq(arg[width:].any())]
        # the entry, and what the dispatcher needs of it: in flip-flops while it is the head,
        # and as the entry behind the head if it is a CR
        decode = m.submodules.decode = CommandDecode(p, straps=self.straps)
        if self.straps:
            m.d.comb += decode.row.eq(self.strap.row)
        m.d.comb += [
            cmdq.w.payload.data.eq(self.i.payload.data),
            cmdq.w.payload.ctrl.eq(self.i.payload.ctrl),
            cmdq.w.payload.is_cmd.eq(is_cmd), cmdq.w.payload.is_weight.eq(is_weight),
            cmdq.w.valid.eq(self.i.valid & to_cmd & ~discard),
            decode.data.eq(self.i.payload.data), decode.ctrl.eq(self.i.payload.ctrl),
            decode.is_cmd.eq(is_cmd), decode.is_weight.eq(is_weight),
            cmdq.w_peek.eq(decode.ahead), cmdq.w_held.eq(decode.held),
        ]
        registered = self.registered_ramp
        room = []
        for fifo, direct, ramp in ((pnq, self.psum_n_in, to_n), (psq, self.psum_s_in, to_s)):
            from_ramp = self.i.valid & ramp
            if not self.ramp_psums:         # the bypass alone
                wiring.connect(m, wiring.flipped(direct), fifo.w)
                continue
            if registered:      # the ramp's psum was promised room: it goes first
                room.append(~fifo.r.valid)
                m.d.comb += [
                    direct.ready.eq(fifo.w.ready & ~from_ramp),
                    fifo.w.payload.eq(Mux(from_ramp, self.i.payload.data, direct.payload)),
                ]
            else:               # the bypass goes first
                room.append(fifo.w.ready & ~direct.valid)
                m.d.comb += [
                    direct.ready.eq(fifo.w.ready),
                    fifo.w.payload.eq(Mux(direct.valid, direct.payload, self.i.payload.data)),
                ]
            m.d.comb += fifo.w.valid.eq(direct.valid | from_ramp)
        if not registered:
            if not self.ramp_psums:         # psum colors are other commands here
                room = [cmdq.w.ready] * 2
            m.d.comb += [
                self.i.ready.eq(Mux(to_cmd, Mux(is_cmd, cmd_room, cmdq.w.ready),
                                    Mux(to_n, room[0], room[1]))),
                self.accept.eq(Cat(cmdq.w.ready, room[0], room[1], cmd_room)),
            ]
        else:
            # What may follow the word on ``i`` (the ramp's register) in the next cycle, all
            # of it from registers: the router grants only that, so ``i`` always takes its word
            # (``ready`` is 1) and the router's ramp is never held up by the core's decode.
            # Command FIFO: room for one more after the word on ``i``, if it enters. Psums: only
            # into an empty FIFO (by then at most one word in it: the bypass waits for a psum
            # on ``i``); ramp psums are rare (the tile's take the bypass).
            entering = self.i.valid & to_cmd & ~discard
            room_after = Mux(entering, ~cmdq.fill[self.cmd_depth - 2], cmdq.w.ready)
            if not self.ramp_psums:         # psum colors are other commands here
                room = [room_after] * 2
            new_col = arg[:width] == col
            selected_after = Mux(self.i.valid & is_select, new_col & ~arg[width:].any(),
                                 selected)
            m.d.comb += [
                self.i.ready.eq(1),
                self.accept.eq(Cat(room_after, room[0], room[1], room_after | ~selected_after)),
            ]
        m.d.comb += self.taken.eq(Cat(self.i.valid & self.i.ready & ~discard,
                                      self.psum_n_in.valid & self.psum_n_in.ready,
                                      self.psum_s_in.valid & self.psum_s_in.ready))
        return m


class CommandDecode(wiring.Component):
    """What the dispatcher needs of a command FIFO entry, worked out as it is written: its
    :func:`command_held_layout` part (``held``) and, for a carriage return, its
    :func:`cr_ahead_layout` part (``ahead``, for when it is the entry behind the head).

    Combinational (latency 0). Bad input: an entry only dropped as an error (a foreign color,
    an AXPY whose slot is outside ``X`` and not :data:`~rtl.isa.ONES_SLOT`, a CR of this row
    with a result slot outside ``Y``, a CR_ACT or CR_DELTA of this row with one outside ``X``)
    gets the ``op`` :data:`DROPPED_OP` and is neither ``hand`` nor ``free``.

    Parameters
    ----------
    params : CoreParams
    straps : bool
        The row from ``row`` instead of ``params.row``.

    Members
    -------
    data, ctrl : In(32), In(1)
        The wavelet's data and control bit.
    is_cmd, is_weight : In(1)
        Its color is ``cmd``, ``weight`` (neither: a foreign color).
    row : In(core_strap_layout(rows, cols)["row"])
        Only with ``straps=True``.
    held : Out(command_held_layout(params))
    ahead : Out(cr_ahead_layout(rows, n_out, n_feat))
    """

    def __init__(self, params, *, straps=False):
        if not isinstance(params, CoreParams):
            raise TypeError(f"params must be a CoreParams, not {params!r}")
        self.params = params
        self.straps = bool(straps)
        members = {
            "data":      In(32),
            "ctrl":      In(1),
            "is_cmd":    In(1),
            "is_weight": In(1),
            "held":      Out(command_held_layout(params)),
            "ahead":     Out(cr_ahead_layout(params.rows, params.n_out, params.n_feat)),
        }
        if self.straps:
            strap = data.Layout.cast(core_strap_layout(params.rows, params.cols))
            members["row"] = In(strap["row"].shape)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        p, ahead, held = self.params, self.ahead, self.held
        is_cmd, is_weight = self.is_cmd, self.is_weight
        split = m.submodules.cr_split = RowSplit(p.rows, CR_O_BITS)
        control = data.View(ControlPayload, self.data)
        cr_arg, op = data.View(CrArg, control.arg), control.op.as_value()
        o = cr_arg.o
        is_cr, ok, mine = Signal(), Signal(), Signal()
        is_delta = op == ControlOp.CR_DELTA.value
        is_act = (op == ControlOp.CR_ACT.value) | is_delta     # the owner writes X
        m.d.comb += [
            split.o.eq(o),
            ahead.job.slot.eq(split.slot), ahead.job.owner.eq(split.owner),
            ahead.job.raw.eq(op == ControlOp.CR_OUT.value), ahead.job.act.eq(is_act & mine),
            ahead.job.delta.eq(is_delta & mine),
            ahead.job.quiet_n.eq(cr_arg.quiet_n), ahead.job.quiet_s.eq(cr_arg.quiet_s),
            is_cr.eq(self.ctrl & (is_cmd | is_weight)
                     & op.matches(ControlOp.CR.value, ControlOp.CR_OUT.value,
                                  ControlOp.CR_ACT.value, ControlOp.CR_DELTA.value)),
            ahead.hand.eq(is_cr & ok & ~cr_arg.skip), ahead.free.eq(is_cr & ok & cr_arg.skip),
        ]
        row = self.row if self.straps else p.row
        # from the sources, not read back from ``ahead`` (one vector with ``hand`` and ``free``,
        # which depend on ``ok``: Verilator would see a combinational loop through it)
        m.d.comb += [
            mine.eq(split.owner == row),
            # o // rows < n_out (a CR), < n_feat (a CR_ACT, CR_DELTA); a CR_OUT's is not limited
            ok.eq((op == ControlOp.CR_OUT.value) | ~mine
                  | Mux(is_act, below(o, p.n_feat * p.rows), below(o, p.n_out * p.rows))),
        ]
        weight = data.View(WeightPayload, self.data)
        axpy = ~self.ctrl & is_weight
        ones = axpy & (weight.slot == ONES_SLOT)
        dropped = ((~is_cmd & ~is_weight)                                      # foreign
                   | (axpy & ~below(weight.slot, p.n_feat) & ~ones)
                   | (is_cr & ~ok))        # CR, CR_ACT, CR_DELTA with a slot outside Y, X
        # a CR_ACT or CR_DELTA of another row is a CR there; one with ``skip`` a skip like any
        # other
        op_held = Mux(ones, ONES_OP, Mux(is_cr & cr_arg.skip, SKIP_OP,
                                         Mux(is_act & ~mine, ControlOp.CR.value, op)))
        m.d.comb += [
            held.ctrl.eq(self.ctrl | dropped),
            held.op.as_value().eq(Mux(dropped, DROPPED_OP, op_held)),
            held.is_weight.eq(is_weight), held.slot.eq(Mux(ones, 0, weight.slot)),
            held.zero.eq(p.fmt.is_zero(p.fmt.operand_from_bits(self.data))),
        ]
        return m
