"""The compute core of a processing element: dataflow tasks, zero-skip AXPY, partial sums."""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .core_acc import AccBuffers
from .core_count import CounterBank
from .core_dispatch import Dispatcher
from .core_input import ONES_OP, InputSorter
from .core_lane import AxpyLane
from .core_params import CoreParams
from .core_read import ReadEngine
from .isa import MaskArg, ReadArg, core_strap_layout
from .psum import PsumEngine
from .validate import integer
from .wavelet import ControlPayload, Wavelet

__all__ = ["Core", "OutputRegister"]


class Core(wiring.Component):
    """The core behind a router's ramp (the contract is ``docs/pe.md``).

    Components, joined with ``wiring.connect``: the :class:`~rtl.core_input.InputSorter` sorts
    wavelets by color into two psum FIFOs and a command FIFO (every other color, in order; a
    color other than ``cmd`` and ``weight`` is dropped as an error when it reaches the head).
    The :class:`~rtl.core_dispatch.Dispatcher` runs the commands one at a time: ADDR, LOAD, READ
    (through the :class:`~rtl.core_read.ReadEngine`), AXPY, CR, MASK. An AXPY walks the nonzero
    tokens of its slot whose gate bit is set, ``lanes`` banks in parallel, one token per bank
    per cycle, each bank an :class:`~rtl.core_lane.AxpyLane` with its own MAC and its bits of
    the gate; a zero weight costs one cycle and no multiply; the ones slot
    (:data:`~rtl.isa.ONES_SLOT`) is the format's one in every token. A MASK (the sorter keeps
    only this column's) sets 16 gate bits in a cycle. A CR (its output feature split by a
    :class:`~rtl.core_rows.RowSplit`, no divider) hands the active buffer of the
    :class:`~rtl.core_acc.AccBuffers` to the :class:`~rtl.psum.PsumEngine`, switches to the next
    (zeroed) buffer and sets every gate bit again; one with ``skip`` (``CrArg``) only sets the
    gate bits: no buffer, so it never waits for one. The engine writes ``Y`` (a CR), sends raw
    totals (a CR_OUT), or writes the ReLU of the results into ``X`` and its masks through the
    lanes and sends them (a CR_ACT of this row), or for every active token the result where
    the gate it retired with is set and 0 elsewhere (a CR_DELTA of this row). The counters are a
    :class:`~rtl.core_count.CounterBank` (LUT RAM and one adder, or two), read by the READ
    engine. The :class:`OutputRegister` sends the engine's words first, then READ replies.

    Latency: an AXPY's last accumulation lands 2 cycles after its last issue. Throughput: one
    command per cycle, an AXPY in ``max(1, max over banks of nonzero gated tokens)`` cycles. A CR
    (not a ``skip``) waits (stall cycles) while every other buffer waits for the engine; a READ
    waits until the MACs and the engine are idle, so it sees every earlier command's effect; a
    LOAD waits while the engine is busy (a CR_ACT's or CR_DELTA's engine writes ``X``
    through the LOAD's port), and so does a TOKENS (a CR_DELTA's engine visits the active
    tokens); an AXPY waits while an earlier CR_ACT or CR_DELTA still writes its slot. After an
    ADDR with ``pairs`` a LOAD writes its two operands, a cycle each.

    Bad input (``docs/pe.md``: a slot outside ``X`` but the ones slot, a LOAD or READ outside
    the map, an unknown opcode, a wavelet of a foreign color, a CR for a result slot outside
    ``Y``, a CR_ACT or CR_DELTA for one outside ``X``, a MASK of a chunk past ``n_tok``) is
    dropped; ``errors`` counts it and ``error`` stays set. The core keeps running.

    Parameters
    ----------
    params : CoreParams
    cmd_depth, psum_depth : int
        Entries of the command FIFO and of each psum FIFO (at least 2).
    acc_buffers : int
        Accumulator buffers, 2..16: a CR stalls only when every buffer but the active one waits
        for the partial-sum engine, so with more buffers a row can run that many outputs ahead
        of a slower neighbour. Timing only: results do not depend on it.
    counter_adders : int
        The :class:`~rtl.core_count.CounterBank`'s adders: 1 or 2 (the same counts on a
        shorter path, for more logic).
    held_copies : int
        The command FIFO's copies of the parts its head keeps in flip-flops
        (:class:`~rtl.peek_fifo.PeekFIFO`): 1 or 2 (the same cycles; with 2 synthesis cannot
        merge the two reads that load the head, for a few LUT-RAM cells more).
    registered_ramp : bool
        The router's ramp output is a register (the tile's): ``accept`` promises room for the
        word the router grants now on top of the one on ``i``
        (:class:`~rtl.core_input.InputSorter`).
    ramp_psums : bool
        Whether psums may come on ``i`` (:class:`~rtl.core_input.InputSorter`): a tile's come
        on ``psum_n_in`` / ``psum_s_in`` alone, and a psum color on its ramp is a foreign one.

    Members
    -------
    i : In(stream.Signature(Wavelet))
        From the router's ramp (its ``ready`` depends on the offered color; with
        ``registered_ramp`` it is 1: whatever is offered was promised by ``accept``).
    o : Out(stream.Signature(Wavelet))
        To the router's ramp: psums and READ replies.
    error, overflow : Out(1)
        Sticky flags.
    idle : Out(1)
        Nothing queued, running or waiting to be sent: every command taken so far has had its
        full effect.
    accept : Out(4)
        What ``i`` would take this cycle (with ``registered_ramp``: in the next, after the word
        on ``i`` now), by class: bit 0 a command (any color but ``cmd`` and the psum colors),
        bit 1 ``psum_from_n``, bit 2 ``psum_from_s``, bit 3 ``cmd`` (for the router's ramp;
        :class:`~rtl.core_input.InputSorter`).
    psum_n_in, psum_s_in : In(stream.Signature(32))
        Psums straight from the north and south neighbours (the tile's bypass), beside ``i``:
        a psum a cycle from each side and a command from the ramp, all at once.
    strap : In(core_strap_layout(rows, cols))
        Only with ``straps=True``: the colors, the row and the column, as inputs
        (``params.colors``, ``params.row`` and ``params.col`` are then ignored); see
        :func:`~rtl.isa.core_strap_value`.
    """

    def __init__(self, params, *, cmd_depth=4, psum_depth=4, acc_buffers=2, straps=False,
                 registered_ramp=False, counter_adders=1, held_copies=1, ramp_psums=True):
        if not isinstance(params, CoreParams):
            raise TypeError(f"params must be a CoreParams, not {params!r}")
        cmd_depth = integer("cmd_depth", cmd_depth, 2)
        psum_depth = integer("psum_depth", psum_depth, 2)
        acc_buffers = integer("acc_buffers", acc_buffers, 2, 16)
        self.params = params
        self.cmd_depth = cmd_depth
        self.psum_depth = psum_depth
        self.acc_buffers = acc_buffers
        self.straps = bool(straps)
        self.registered_ramp = bool(registered_ramp)
        self.ramp_psums = bool(ramp_psums)
        self.counter_adders = integer("counter_adders", counter_adders, 1, 2)
        self.held_copies = integer("held_copies", held_copies, 1, 2)
        members = {
            "i":        In(stream.Signature(Wavelet)),
            "o":        Out(stream.Signature(Wavelet)),
            "error":    Out(1),
            "overflow": Out(1),
            "idle":     Out(1),
            "accept":   Out(4),
            "psum_n_in": In(stream.Signature(32)),
            "psum_s_in": In(stream.Signature(32)),
        }
        if self.straps:
            members["strap"] = In(core_strap_layout(params.rows, params.cols))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        p, fmt = self.params, self.params.fmt
        colors = self.strap if self.straps else p.colors
        sorter = m.submodules.sorter = InputSorter(p, cmd_depth=self.cmd_depth,
                                                   psum_depth=self.psum_depth, straps=self.straps,
                                                   registered_ramp=self.registered_ramp,
                                                   held_copies=self.held_copies,
                                                   ramp_psums=self.ramp_psums)
        disp = m.submodules.dispatch = Dispatcher(p)
        engine = m.submodules.psum = PsumEngine(p, straps=self.straps)
        accs = m.submodules.acc = AccBuffers(p, self.acc_buffers)
        reader = m.submodules.read = ReadEngine(p)
        bank = m.submodules.counters = CounterBank(p, adders=self.counter_adders)
        out = m.submodules.out = OutputRegister()
        lanes = [AxpyLane(p, b) for b in range(p.lanes)]
        for b, lane in enumerate(lanes):
            m.submodules[f"lane{b}"] = lane
            wiring.connect(m, lane.acc, getattr(accs, f"mac{b}"))
        if self.straps:
            m.d.comb += [sorter.strap.eq(self.strap), engine.strap.eq(self.strap)]
        wiring.connect(m, wiring.flipped(self.i), sorter.i)
        wiring.connect(m, wiring.flipped(self.psum_n_in), sorter.psum_n_in)
        wiring.connect(m, wiring.flipped(self.psum_s_in), sorter.psum_s_in)
        wiring.connect(m, sorter.psum_n, engine.psum_n)
        wiring.connect(m, sorter.psum_s, engine.psum_s)
        wiring.connect(m, sorter.cmd, disp.cmd)
        wiring.connect(m, accs.job, engine.job)
        wiring.connect(m, engine.acc, accs.drain)
        wiring.connect(m, reader.count, bank.port)
        wiring.connect(m, engine.out, out.first)
        wiring.connect(m, reader.out, out.second)
        wiring.connect(m, out.o, wiring.flipped(self.o))
        m.d.comb += self.accept.eq(sorter.accept)

        y = m.submodules.y = Memory(shape=fmt.operand_shape, depth=p.n_out * p.n_tok, init=[])
        y_rp, y_wp = y.read_port(), y.write_port()
        head, held = sorter.cmd.head, sorter.cmd.held
        arg = data.View(ControlPayload, head.data).arg
        ones = ~held.ctrl & (held.op.as_value() == ONES_OP)        # an AXPY of the ones slot
        m.d.comb += [
            y_wp.addr.eq(engine.y_address), y_wp.data.eq(engine.y_value),
            y_wp.en.eq(engine.y_write),
            y_rp.addr.eq(reader.y_address), y_rp.en.eq(reader.y_read), reader.y_data.eq(y_rp.data),
            reader.overflow.eq(self.overflow),          # the ``overflow`` counter is the flag
            reader.out_color.eq(colors.out),
            reader.start.eq(disp.start_read), disp.reader_active.eq(reader.active),
            reader.arg.eq(data.View(ReadArg, arg)),
            disp.acc_full.eq(accs.full),
            # the engine's work: a buffer to reduce, or a CR_ACT's word not yet in X
            disp.engine_busy.eq(accs.pending | engine.x_pending),
            # an AXPY waits for an earlier CR_ACT's words into its slot (the ones slot reads no X)
            accs.slot.eq(held.slot),
            disp.x_hazard.eq((accs.writes_slot | (engine.x_pending & (engine.x_slot == held.slot)))
                             & ~ones),
            accs.issue.eq(disp.walk), accs.retire.eq(disp.retire),
            accs.retire_job.eq(disp.retire_job),
            # the gate goes with the buffer, a bit per token in token order (token t is index
            # t // lanes of bank t % lanes)
            accs.retire_gate.eq(Cat(lanes[t % p.lanes].gate[t // p.lanes]
                                    for t in range(p.n_tok))),
            reader.tokens.eq(disp.tokens),
            disp.lanes_busy.eq(Cat(lane.busy for lane in lanes).any()),
            disp.lanes_done.eq(Cat(lane.done for lane in lanes)),
        ]
        # a LOAD's operand: its low half, or a pair's high half in the pair's second cycle
        high = fmt.operand_from_bits(head.data[16:])
        value = Mux(disp.high, high, fmt.operand_from_bits(head.data))
        zero_value = Mux(disp.high, fmt.is_zero(high), held.zero)
        # the active tokens: every one a CR_DELTA's owner visits
        m.d.comb += engine.open_tokens.eq(disp.gate_open)
        for b, lane in enumerate(lanes):
            m.d.comb += [
                lane.ones.eq(ones),
                lane.x_write.eq(engine.x_write & (engine.x_bank == b)),
                lane.x_slot.eq(engine.x_slot), lane.x_index.eq(engine.x_index),
                lane.x_value.eq(engine.x_value),
                disp.lanes_nonzero[b].eq(lane.nonzero),
                lane.feature.eq(disp.feature), lane.walk.eq(disp.walk),
                lane.active.eq(disp.active),
                lane.weight.eq(value), lane.zero_weight.eq(zero_value),
                lane.load.eq(disp.load[b]), lane.load_index.eq(disp.load_index),
                lane.load_value.eq(value), lane.load_zero.eq(zero_value),
                lane.gate_arg.eq(data.View(MaskArg, arg)),
                lane.gate_write.eq(disp.gate_write), lane.gate_reset.eq(disp.gate_reset),
                lane.gate_open.eq(Cat(disp.gate_open[t]
                                      for t in range(b, p.n_tok, p.lanes))),
                lane.read.eq(reader.x_read[b]), lane.read_address.eq(reader.x_address),
                reader.x_data[b].eq(lane.x_data),
            ]
        self._counters(m, sorter, disp, reader, engine, bank.inc)
        with m.If(disp.error | reader.error):
            m.d.sync += self.error.eq(1)
        with m.If(Cat(*(lane.overflow for lane in lanes), engine.overflow).any()):
            m.d.sync += self.overflow.eq(1)
        m.d.comb += self.idle.eq(~(sorter.cmd.valid | sorter.psum_n.valid | sorter.psum_s.valid
                                   | disp.active | disp.lanes_busy | accs.pending
                                   | reader.active | engine.y_write | engine.x_pending
                                   | self.o.valid))
        return m

    @staticmethod
    def _counters(m, sorter, disp, reader, engine, inc):
        """This cycle's counter increments."""
        # the wavelets taken are counted a cycle later: the ramp's offer and the core's accept
        # are one combinational path through the router, and the counter's adder does not
        # need to be on it
        taken = Signal.like(sorter.taken)
        m.d.sync += taken.eq(sorter.taken)
        m.d.comb += [
            inc.wavelets_in.eq(taken[0] + taken[1] + taken[2]),
            inc.wavelets_out.eq((engine.out.valid & engine.out.ready)
                                | (reader.out.valid & reader.out.ready)),
            inc.busy_cycles.eq(disp.busy | reader.busy),
            inc.stall_cycles.eq(disp.stall | reader.stall),
            inc.errors.eq(disp.error | reader.error),
            inc.macs_issued.eq(disp.macs_issued), inc.macs_skipped_act.eq(disp.macs_skipped_act),
            inc.macs_skipped_weight.eq(disp.macs_skipped_weight),
        ]


class OutputRegister(wiring.Component):
    """Two streams into one register: ``first`` has priority over ``second``.

    The core's output: the partial-sum engine's words first, then READ replies. Latency: a word
    taken in one cycle is on ``o`` in the next. Throughput: a word a cycle (a word is taken in
    the cycle ``o``'s is taken).

    Members
    -------
    first, second : In(stream.Signature(Wavelet))
    o : Out(stream.Signature(Wavelet))
    """

    first: In(stream.Signature(Wavelet))
    second: In(stream.Signature(Wavelet))
    o: Out(stream.Signature(Wavelet))

    def elaborate(self, platform):
        m = Module()
        out_free = ~self.o.valid | self.o.ready
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        with m.If(out_free & self.first.valid):
            m.d.comb += self.first.ready.eq(1)
            m.d.sync += [self.o.payload.eq(self.first.payload), self.o.valid.eq(1)]
        with m.Elif(out_free & self.second.valid):
            m.d.comb += self.second.ready.eq(1)
            m.d.sync += [self.o.payload.eq(self.second.payload), self.o.valid.eq(1)]
        return m
