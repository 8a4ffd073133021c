"""The compute core of a processing element: dataflow tasks, zero-skip AXPY, partial sums."""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .core_params import COUNTER_BASE, COUNTERS, Y_BASE, CoreParams
from .isa import AddrArg, CrArg, CrEntry, ReadArg, WeightPayload, core_strap_layout
from .mac import Mac
from .peek_fifo import PeekFIFO
from .psum import PsumEngine
from .validate import integer
from .wavelet import WAVELET_BITS, ControlOp, ControlPayload, Wavelet

__all__ = ["Core"]


def _popcount(value):
    return sum(value[i] for i in range(len(value))) if len(value) else Const(0)


class Core(wiring.Component):
    """The core behind a router's ramp (the contract is ``docs/pe.md``).

    Wavelets arrive on ``i`` and are sorted by color into two psum FIFOs and a command FIFO
    (every other color, in order; a color other than ``cmd`` and ``weight`` is dropped as an
    error when it reaches the head). Commands run one
    at a time: ADDR, LOAD, READ, AXPY, CR. An AXPY walks the nonzero tokens of its slot, ``lanes``
    banks in parallel, one token per bank per cycle, through a :class:`~rtl.mac.Mac` per bank;
    a zero weight costs one cycle and no multiply. A CR hands the accumulators to the
    :class:`~rtl.psum.PsumEngine` and switches to the other (zeroed) accumulator buffer.

    Latency: an AXPY's last accumulation lands 2 cycles after its last issue. Throughput: one
    command per cycle, an AXPY in ``max(1, max over banks of nonzero tokens)`` cycles. A CR
    waits (stall cycles) while the engine is busy with the previous one; a READ waits until the
    MACs and the engine are idle, so it sees every earlier command's effect.

    Bad input (``docs/pe.md``: a slot outside ``X``, a LOAD or READ outside the map, an unknown
    opcode, a wavelet of a foreign color, a CR for a result slot outside ``Y``) is dropped;
    ``errors`` counts it and ``error`` stays set. The core keeps running.

    Parameters
    ----------
    params : CoreParams
    cmd_depth, psum_depth : int
        Entries of the command FIFO and of each psum FIFO (at least 2).
    acc_buffers : int
        Accumulator buffers, 2..16: a CR stalls only when every buffer but the active one waits
        for the partial-sum engine, so with more buffers a row can run that many outputs ahead
        of a slower neighbour. Timing only: results do not depend on it.

    Members
    -------
    i : In(stream.Signature(Wavelet))
        From the router's ramp (its ``ready`` depends on the offered color).
    o : Out(stream.Signature(Wavelet))
        To the router's ramp: psums and READ replies.
    error, overflow : Out(1)
        Sticky flags.
    idle : Out(1)
        Nothing queued, running or waiting to be sent: every command taken so far has had its
        full effect.
    accept : Out(3)
        What ``i`` would take this cycle, by class: bit 0 a command (any color but the psum
        colors), bit 1 ``psum_from_n``, bit 2 ``psum_from_s`` (for the router's ramp).
    psum_n_in, psum_s_in : In(stream.Signature(32))
        Psums straight from the north and south neighbours (the tile's bypass), beside ``i``:
        a psum a cycle from each side and a command from the ramp, all at once.
    strap : In(core_strap_layout(rows))
        Only with ``straps=True``: the colors and the row, as inputs (``params.colors`` and
        ``params.row`` are then ignored); see :func:`~rtl.isa.core_strap_value`.
    """

    def __init__(self, params, *, cmd_depth=4, psum_depth=4, acc_buffers=2, straps=False):
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
        members = {
            "i":        In(stream.Signature(Wavelet)),
            "o":        Out(stream.Signature(Wavelet)),
            "error":    Out(1),
            "overflow": Out(1),
            "idle":     Out(1),
            "accept":   Out(3),
            "psum_n_in": In(stream.Signature(32)),
            "psum_s_in": In(stream.Signature(32)),
        }
        if self.straps:
            members["strap"] = In(core_strap_layout(params.rows))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        p, fmt = self.params, self.params.fmt
        colors, row = (self.strap, self.strap.row) if self.straps else (p.colors, p.row)
        lanes, tpb, n_tok = p.lanes, p.tpb, p.n_tok
        n_buf = self.acc_buffers
        counters = {name: Signal(32, name=name) for name in COUNTERS}
        error_now = Signal(1)          # an error found this cycle

        # -- input sorting ------------------------------------------------------------------
        cmdq = m.submodules.cmd_fifo = PeekFIFO(WAVELET_BITS, self.cmd_depth)
        pnq = m.submodules.psum_n_fifo = SyncFIFO(width=32, depth=self.psum_depth)
        psq = m.submodules.psum_s_fifo = SyncFIFO(width=32, depth=self.psum_depth)
        color = self.i.payload.color
        to_n, to_s = color == colors.psum_from_n, color == colors.psum_from_s
        to_cmd = ~to_n & ~to_s          # foreign colors too: dropped in order, at dispatch
        m.d.comb += [
            cmdq.w_data.eq(self.i.payload), cmdq.w_en.eq(self.i.valid & to_cmd),
        ]
        # Psums come from the ramp or, with priority, straight from a neighbour (psum_*_in).
        room = {}
        for fifo, direct, ramp in ((pnq, self.psum_n_in, to_n), (psq, self.psum_s_in, to_s)):
            room[fifo] = fifo.w_rdy & ~direct.valid
            m.d.comb += [
                direct.ready.eq(fifo.w_rdy),
                fifo.w_data.eq(Mux(direct.valid, direct.payload, self.i.payload.data)),
                fifo.w_en.eq(direct.valid | (self.i.valid & ramp)),
            ]
        m.d.comb += [
            self.i.ready.eq(Mux(to_cmd, cmdq.w_rdy, Mux(to_n, room[pnq], room[psq]))),
            self.accept.eq(Cat(cmdq.w_rdy, room[pnq], room[psq])),
        ]
        taken = Cat(self.i.valid & self.i.ready, self.psum_n_in.valid & self.psum_n_in.ready,
                    self.psum_s_in.valid & self.psum_s_in.ready)
        m.d.sync += counters["wavelets_in"].eq(
            counters["wavelets_in"] + taken[0] + taken[1] + taken[2])

        # -- memories ---------------------------------------------------------------------------
        xs, masks, accs = [], [], []
        for b in range(lanes):
            x = m.submodules[f"x{b}"] = Memory(shape=fmt.operand_shape, depth=p.n_feat * tpb,
                                               init=[])
            mask = m.submodules[f"mask{b}"] = Memory(shape=tpb, depth=p.n_feat, init=[])
            xs.append((x.read_port(), x.write_port()))
            masks.append((mask.read_port(domain="comb"), mask.write_port()))
            pair = []
            for k in range(n_buf):
                # Block RAM even when small: as flip-flops or distributed RAM the buffers
                # cost more logic than anything else in the core (docs/fpga.md).
                acc = m.submodules[f"acc{b}_{k}"] = Memory(shape=fmt.acc_shape, depth=tpb,
                                                           init=[], attrs={"ram_style": "block"})
                wp = acc.write_port()
                pair.append((acc.read_port(transparent_for=(wp,)), wp))
            accs.append(pair)
        y = m.submodules.y = Memory(shape=fmt.operand_shape, depth=p.n_out * n_tok, init=[])
        y_rp, y_wp = y.read_port(), y.write_port()

        # -- command decode -----------------------------------------------------------------
        head = data.View(Wavelet, cmdq.r_data)
        ctrl = data.View(ControlPayload, head.data)
        arg = ctrl.arg
        read_arg, cr_o = data.View(ReadArg, arg), data.View(CrArg, arg).o    # READ, CR arguments
        is_weight = head.color == colors.weight
        is_data = ~head.ctrl
        value = fmt.operand_from_bits(head.data)
        zero_value = fmt.is_zero(value)
        slot = data.View(WeightPayload, head.data).slot
        op = ctrl.op.as_value()
        pop = Signal()
        self._axpy_done = axpy_done = Signal()     # an AXPY's last cycle
        retire = Signal()
        busy = Signal()
        stall = Signal()
        m.d.comb += cmdq.r_en.eq(pop)

        buf = Signal(range(n_buf))         # active accumulator buffer
        ebuf = Signal(range(n_buf))        # buffer of the engine's current or next reduction
        ebuf_next = Signal(range(n_buf))
        m.d.comb += ebuf_next.eq(Mux(ebuf == n_buf - 1, 0, ebuf + 1))
        retired = Signal(range(n_buf))     # buffers handed to the engine and not yet reduced
        crq = m.submodules.cr_fifo = SyncFIFO(width=CrEntry.as_shape().size, depth=n_buf - 1)
        cr_in, cr_out = data.View(CrEntry, crq.w_data), data.View(CrEntry, crq.r_data)
        active = Signal()                  # an AXPY is part-way through its tokens
        remaining = [Signal(tpb, name=f"rem{b}") for b in range(lanes)]
        ptr = Signal(16)
        engine = m.submodules.psum = PsumEngine(p, straps=self.straps)
        if self.straps:
            m.d.comb += engine.strap.eq(self.strap)
        macs = []
        for b in range(lanes):
            macs.append(Mac(fmt))
            m.submodules[f"mac{b}"] = macs[-1]

        # MAC pipeline registers: s1 = X read returned, s2 = accumulator read returned.
        s1_valid = [Signal(name=f"s1_valid{b}") for b in range(lanes)]
        s1_index = [Signal(range(tpb), name=f"s1_index{b}") for b in range(lanes)]
        s1_buf, s2_buf = Signal(range(n_buf)), Signal(range(n_buf))
        s1_weight = Signal(fmt.operand_shape)
        s2_index = [Signal(range(tpb), name=f"s2_index{b}") for b in range(lanes)]
        pipeline_busy = Cat(*s1_valid, *(mac.s1_valid for mac in macs)).any()

        # Mask lookup: the AXPY slot, or the LOAD pointer's feature.
        f_of_ptr = ptr >> (n_tok.bit_length() - 1)
        t_of_ptr = ptr[:n_tok.bit_length() - 1] if n_tok > 1 else Const(0, 1)
        mask_row = Signal(range(p.n_feat))
        m.d.comb += mask_row.eq(Mux(is_data & is_weight, slot, f_of_ptr))
        for b in range(lanes):
            m.d.comb += masks[b][0].addr.eq(mask_row)

        # READ engine state.
        rd_active, rd_send = Signal(), Signal()
        rd_address, rd_left = Signal(16), Signal(12)
        rd_word, rd_snapshot = Signal(32), {n: Signal(32, name=f"snap_{n}") for n in
                                            ("busy_cycles", "errors", "wavelets_out")}
        rd_bank, rd_region = Signal(range(lanes)), Signal(2)   # region: 0 X, 1 Y, 2 counter, 3 bad
        read_out = stream.Signature(Wavelet).create()

        # -- the dispatcher -------------------------------------------------------------------
        # Defaults: no MAC issue, no memory reads (read data then holds for the engine).
        m.d.sync += [v.eq(0) for v in s1_valid]
        for b in range(lanes):
            m.d.comb += xs[b][0].en.eq(0)
            for k in range(n_buf):
                m.d.comb += accs[b][k][0].en.eq(0)
        m.d.comb += y_rp.en.eq(0)
        n_x = p.n_feat * n_tok
        with m.If(rd_active):
            self._read_engine(m, p, counters, rd_snapshot, rd_send, rd_address, rd_left,
                              rd_word, rd_bank, rd_region, rd_active, read_out, xs, y_rp,
                              busy, stall, error_now)
        with m.Elif(cmdq.r_rdy):
            with m.If((head.color != colors.cmd) & ~is_weight):                   # foreign
                m.d.comb += [pop.eq(1), busy.eq(1), error_now[0].eq(1)]
            with m.Elif(is_data & ~is_weight):                                    # LOAD
                m.d.comb += [pop.eq(1), busy.eq(1)]
                m.d.sync += ptr.eq(ptr + 1)
                with m.If(ptr < n_x):
                    bank = t_of_ptr % lanes
                    index = t_of_ptr // lanes
                    for b in range(lanes):
                        with m.If(bank == b):
                            m.d.comb += [
                                xs[b][1].addr.eq(f_of_ptr * tpb + index),
                                xs[b][1].data.eq(value), xs[b][1].en.eq(1),
                                masks[b][1].addr.eq(f_of_ptr),
                                masks[b][1].en.eq(1),
                            ]
                            bit = Const(1, tpb) << index
                            m.d.comb += masks[b][1].data.eq(
                                Mux(zero_value, masks[b][0].data & ~bit, masks[b][0].data | bit))
                with m.Else():
                    m.d.comb += error_now[0].eq(1)
            with m.Elif(is_data):                                                 # AXPY
                self._axpy(m, p, counters, value, zero_value, slot, active, remaining, masks, xs,
                           s1_valid, s1_index, s1_weight, s1_buf, buf, pop, busy, error_now)
            with m.Elif(op == ControlOp.ADDR.value):
                m.d.comb += [pop.eq(1), busy.eq(1)]
                m.d.sync += ptr.eq(data.View(AddrArg, arg).addr)
            with m.Elif(op == ControlOp.READ.value):
                with m.If(pipeline_busy | (retired != 0)):
                    m.d.comb += stall.eq(1)
                with m.Else():
                    m.d.comb += pop.eq(1)
                    m.d.sync += [rd_address.eq(read_arg.addr), rd_left.eq(read_arg.len),
                                 rd_active.eq(read_arg.len != 0), rd_send.eq(0)]
                    m.d.sync += [rd_snapshot[n].eq(counters[n]) for n in rd_snapshot]
                    m.d.comb += busy.eq(1)
            with m.Elif(op.matches(ControlOp.CR.value, ControlOp.CR_OUT.value)):
                raw = op == ControlOp.CR_OUT.value
                with m.If(~raw & (cr_o % p.rows == row) & (cr_o // p.rows >= p.n_out)):
                    m.d.comb += [pop.eq(1), busy.eq(1), error_now[0].eq(1)]
                with m.Elif(retired == n_buf - 1):
                    m.d.comb += stall.eq(1)
                with m.Else():
                    # a CR's own cycle is a wait: the CR is free when it rides on an AXPY (below)
                    m.d.comb += [pop.eq(1), stall.eq(1), retire.eq(1),
                                 cr_in.o.eq(cr_o), cr_in.raw.eq(raw), crq.w_en.eq(1)]
                    m.d.sync += buf.eq(Mux(buf == n_buf - 1, 0, buf + 1))
            with m.Elif(op.matches(*(o.value for o in (ControlOp.NOP, ControlOp.ADVANCE,
                                                       ControlOp.RESET, ControlOp.TEARDOWN)))):
                m.d.comb += [pop.eq(1), busy.eq(1)]
            with m.Else():
                m.d.comb += [pop.eq(1), busy.eq(1), error_now[0].eq(1)]

        # -- a CR right behind an AXPY rides on the AXPY's last cycle ------------------------------
        nxt = data.View(Wavelet, cmdq.r_data1)
        nxt_op = data.View(ControlPayload, nxt.data).op.as_value()
        nxt_o = data.View(CrArg, data.View(ControlPayload, nxt.data).arg).o
        nxt_raw = nxt_op == ControlOp.CR_OUT.value
        fuse = Signal()
        m.d.comb += fuse.eq(
            axpy_done & cmdq.r_rdy1 & nxt.ctrl
            & ((nxt.color == colors.weight) | (nxt.color == colors.cmd))
            & nxt_op.matches(ControlOp.CR.value, ControlOp.CR_OUT.value)
            & (nxt_raw | (nxt_o % p.rows != row) | (nxt_o // p.rows < p.n_out))
            & (retired != n_buf - 1))
        with m.If(fuse):
            m.d.comb += [cmdq.r_en2.eq(1), retire.eq(1),
                         cr_in.o.eq(nxt_o), cr_in.raw.eq(nxt_raw), crq.w_en.eq(1)]
            m.d.sync += buf.eq(Mux(buf == n_buf - 1, 0, buf + 1))

        # -- MAC pipeline -----------------------------------------------------------------------
        m.d.sync += s2_buf.eq(s1_buf)
        for b in range(lanes):
            mac = macs[b]
            x_rp = xs[b][0]
            m.d.comb += [mac.valid.eq(s1_valid[b]), mac.a.eq(s1_weight), mac.b.eq(x_rp.data)]
            m.d.sync += s2_index[b].eq(s1_index[b])
            for k in range(n_buf):
                rp, wp = accs[b][k]
                mac_reads = s1_valid[b] & (s1_buf == k)
                mac_writes = mac.s1_valid & (s2_buf == k)
                engine_reads = engine.acc_read & (Mux(engine.read_next, ebuf_next, ebuf) == k)
                engine_clears = engine.acc_clear & (ebuf == k)
                with m.If(mac_reads):
                    m.d.comb += [rp.addr.eq(s1_index[b]), rp.en.eq(1)]
                with m.Elif(engine_reads & (engine.read_bank == b)):
                    m.d.comb += [rp.addr.eq(engine.read_index), rp.en.eq(1)]
                with m.If(mac_writes):
                    m.d.comb += [wp.addr.eq(s2_index[b]), wp.data.eq(mac.sum), wp.en.eq(1)]
                with m.Elif(engine_clears & (engine.clear_bank == b)):
                    m.d.comb += [wp.addr.eq(engine.clear_index), wp.data.eq(0), wp.en.eq(1)]
            m.d.comb += mac.acc.eq(Array(accs[b][k][0].data for k in range(n_buf))[s2_buf])
        m.d.comb += engine.acc_data.eq(
            Array(Array(accs[b][k][0].data for k in range(n_buf))[ebuf] for b in range(lanes))
            [engine.clear_bank])

        # -- retired buffers: reduced one at a time, oldest first ----------------------------------
        engine_done = engine.done
        # An overlapped start reads its buffer in this cycle; a buffer handed over by a CR that
        # rode on an AXPY's last cycle may still have that AXPY's last token one stage into the
        # MAC pipeline (it reads the accumulator now, writes it next cycle): wait a cycle then.
        mac_on_next = Cat(*s1_valid).any() & (s1_buf == ebuf_next)
        m.d.comb += [
            engine.start.eq(crq.r_rdy & engine.can_start & ~(engine.busy & mac_on_next)),
            engine.o.eq(cr_out.o), engine.raw.eq(cr_out.raw),
            crq.r_en.eq(engine.start),
        ]
        with m.If(engine_done):
            m.d.sync += ebuf.eq(ebuf_next)
        m.d.sync += retired.eq(retired + retire - engine_done)

        # -- partial-sum engine connections ---------------------------------------------------
        m.d.comb += [
            engine.psum_n.payload.eq(pnq.r_data), engine.psum_n.valid.eq(pnq.r_rdy),
            pnq.r_en.eq(engine.psum_n.ready),
            engine.psum_s.payload.eq(psq.r_data), engine.psum_s.valid.eq(psq.r_rdy),
            psq.r_en.eq(engine.psum_s.ready),
            y_wp.addr.eq(engine.y_address), y_wp.data.eq(engine.y_value),
            y_wp.en.eq(engine.y_write),
        ]

        # -- output: engine first, then READ replies, through one register ------------------------
        out_free = ~self.o.valid | self.o.ready
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        with m.If(out_free & engine.out.valid):
            m.d.comb += engine.out.ready.eq(1)
            m.d.sync += [self.o.payload.eq(engine.out.payload), self.o.valid.eq(1)]
        with m.Elif(out_free & read_out.valid):
            m.d.comb += read_out.ready.eq(1)
            m.d.sync += [self.o.payload.eq(read_out.payload), self.o.valid.eq(1)]
        with m.If((engine.out.valid & engine.out.ready) | (read_out.valid & read_out.ready)):
            m.d.sync += counters["wavelets_out"].eq(counters["wavelets_out"] + 1)

        # -- counters and flags -----------------------------------------------------------------
        with m.If(busy):
            m.d.sync += counters["busy_cycles"].eq(counters["busy_cycles"] + 1)
        with m.If(stall):
            m.d.sync += counters["stall_cycles"].eq(counters["stall_cycles"] + 1)
        with m.If(error_now.any()):
            m.d.sync += [counters["errors"].eq(counters["errors"] + 1), self.error.eq(1)]
        with m.If(Cat(*(mac.overflow for mac in macs), engine.overflow).any()):
            m.d.sync += [counters["overflow"].eq(1), self.overflow.eq(1)]
        m.d.comb += self.idle.eq(~(cmdq.r_rdy | pnq.r_rdy | psq.r_rdy | active | pipeline_busy
                                   | (retired != 0) | rd_active | self.o.valid))
        self._counters = counters
        return m

    def _axpy(self, m, p, counters, value, zero_value, slot, active, remaining, masks, xs,
              s1_valid, s1_index, s1_weight, s1_buf, buf, pop, busy, error_now):
        """One cycle of an AXPY: issue the lowest remaining nonzero token of every bank."""
        tpb = p.tpb
        m.d.comb += busy.eq(1)
        with m.If(slot >= p.n_feat):
            m.d.comb += [pop.eq(1), error_now[0].eq(1)]
        with m.Else():
            done = Const(1)
            for b in range(p.lanes):
                row = masks[b][0].data
                candidates = Signal(tpb, name=f"cand{b}")
                m.d.comb += candidates.eq(Mux(active, remaining[b], Mux(zero_value, 0, row)))
                lowest = (candidates & (~candidates + 1))[:tpb]
                index = Signal(range(tpb), name=f"issue_index{b}")
                for i in reversed(range(tpb)):
                    with m.If(lowest[i]):
                        m.d.comb += index.eq(i)
                left = candidates & ~lowest
                done = done & (left == 0)
                m.d.comb += [xs[b][0].addr.eq(slot * tpb + index),
                             xs[b][0].en.eq(candidates != 0)]
                m.d.sync += [s1_valid[b].eq(candidates != 0), s1_index[b].eq(index),
                             remaining[b].eq(left)]
            m.d.sync += [s1_weight.eq(value), s1_buf.eq(buf)]
            with m.If(done):
                m.d.comb += [pop.eq(1), self._axpy_done.eq(1)]
                m.d.sync += active.eq(0)
            with m.Else():
                m.d.sync += active.eq(1)
            with m.If(~active):
                nonzero = sum(_popcount(masks[b][0].data) for b in range(p.lanes))
                with m.If(~zero_value):
                    m.d.sync += [
                        counters["macs_issued"].eq(counters["macs_issued"] + nonzero),
                        counters["macs_skipped_act"].eq(
                            counters["macs_skipped_act"] + p.n_tok - nonzero),
                    ]
                with m.Else():
                    m.d.sync += counters["macs_skipped_weight"].eq(
                        counters["macs_skipped_weight"] + p.n_tok)

    def _read_engine(self, m, p, counters, snapshot, send, address, left, word, bank, region,
                     active, out, xs, y_rp, busy, stall, error_now):
        """READ: per word, one cycle to read it and at least one to hand it to the output."""
        n_tok, lanes, tpb = p.n_tok, p.lanes, p.tpb
        colors = self.strap if self.straps else p.colors
        log_tok = n_tok.bit_length() - 1
        in_x = address < p.n_feat * n_tok
        in_y = (address >= Y_BASE) & (address < Y_BASE + p.n_out * n_tok)
        in_c = (address >= COUNTER_BASE) & (address < COUNTER_BASE + len(COUNTERS))
        with m.If(~send):
            m.d.comb += busy.eq(1)
            t = address[:log_tok] if log_tok else Const(0, 1)
            f = address >> log_tok
            for b in range(lanes):
                m.d.comb += [xs[b][0].addr.eq(f * tpb + t // lanes),
                             xs[b][0].en.eq(in_x & (t % lanes == b))]
            m.d.comb += [y_rp.addr.eq(address - Y_BASE), y_rp.en.eq(in_y)]
            live = Array(snapshot.get(name, counters[name]) for name in COUNTERS)
            m.d.sync += [
                bank.eq(t % lanes),
                region.eq(Mux(in_x, 0, Mux(in_y, 1, Mux(in_c, 2, 3)))),
                word.eq(live[(address - COUNTER_BASE)[:4]]),
                send.eq(1),
            ]
        with m.Else():
            x_value = Array(xs[b][0].data for b in range(lanes))[bank]
            reply = data.View(Wavelet, out.payload)
            value = Signal(32)
            with m.Switch(region):
                with m.Case(0):
                    m.d.comb += value.eq(x_value.as_signed())
                with m.Case(1):
                    m.d.comb += value.eq(y_rp.data.as_signed())
                with m.Case(2):
                    m.d.comb += value.eq(word)
            m.d.comb += [reply.data.eq(value), reply.color.eq(colors.out), reply.ctrl.eq(0),
                         out.valid.eq(1)]
            with m.If(out.ready):
                m.d.comb += [busy.eq(1), error_now[0].eq(region == 3)]
                m.d.sync += [address.eq(address + 1), left.eq(left - 1), send.eq(0)]
                with m.If(left == 1):
                    m.d.sync += active.eq(0)
            with m.Else():
                m.d.comb += stall.eq(1)
