"""The core's accumulator buffers: one bank per lane in each buffer, the active buffer the MACs
add into, and the queue of retired buffers the partial-sum engine reduces."""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .core_lane import AccPortSignature
from .core_params import CoreParams
from .isa import cr_job_layout, engine_job_layout
from .psum import AccDrainSignature
from .validate import integer

__all__ = ["AccBuffers"]


class AccBuffers(wiring.Component):
    """``n_buf`` accumulator buffers of ``n_tok`` sums, each split into ``lanes`` banks.

    The MACs add into the active buffer (the one current at the AXPY's ``issue``). ``retire``
    (a carriage return) hands the active buffer, with its job, to the engine's queue and makes
    the next one active, all zero; the engine reduces retired buffers oldest first. A buffer
    retired in the last issue cycle of an AXPY may still have that AXPY's last token one stage
    into a MAC: the engine waits a cycle before it starts on that buffer while finishing
    another (an idle engine reads it a cycle later anyway).

    Each bank (every buffer's words of it) is one LUT RAM, written by its lane's MAC alone and
    read asynchronously through two ports, the MAC's and the engine's, into the reader's
    register, which takes what the MAC writes to that word in the same cycle (a transparent
    read). Nothing clears a word: a flag per word says whether the MAC wrote it since its
    buffer became active (all of a buffer's flags clear the cycle after it does, from
    registers, before any MAC can write it; and at reset), and a word whose
    flag is clear loads its reader's register with 0 (the register's synchronous reset). So
    the buffer multiplexer is the memory's address, not LUTs after it, and the engine's clears
    need no second write port: on the ECP5 the 4 buffers of the ULX3S cost the 32 LUT-RAM cells
    they did as 4 memories, without the buffer multiplexers and the zero writes. Block RAM put
    its clock-to-out and the buffer multiplexer in front of the engine's adders: the tile's
    critical path (``docs/pe.md``, "Implementation notes"). Unlike the block RAM, and the LUT
    RAM before the flags, a reset leaves every buffer zero.

    Parameters
    ----------
    params : CoreParams
    n_buf : int
        Buffers, 2..16.

    Members
    -------
    mac0 .. mac{lanes-1} : In(AccPortSignature(params))
        Each lane's MAC.
    issue : In(1)
        An AXPY issues this cycle: its tokens go to the active buffer.
    retire, retire_job, retire_gate : In
        Hand the active buffer to the engine with its job (``cr_job_layout``) and the gate it
        was filled under (``n_tok`` bits, token order); only while not ``full``.
    slot : In(range(n_feat))
        The slot of the AXPY at the dispatcher's head.
    writes_slot : Out(1)
        A retired buffer not yet reduced (waiting, or being reduced) is a CR_ACT's (or CR_DELTA's)
        whose result goes into ``X[slot]``: the AXPY must wait (with the engine's result stage,
        which holds the last word a cycle or more after the buffer is done). From a slot and a flag
        per buffer, set as it is retired, cleared as the engine is done with it.
    full : Out(1)
        Every buffer but the active one waits for the engine.
    pending : Out(1)
        Some buffer waits for the engine or is being reduced.
    job : Out(stream.Signature(engine_job_layout(rows, n_out, n_feat, n_tok)))
        The oldest retired buffer's job and gate, to the engine.
    drain : In(AccDrainSignature(params))
        The engine reading the buffer it reduces.
    """

    def __init__(self, params, n_buf):
        if not isinstance(params, CoreParams):
            raise TypeError(f"params must be a CoreParams, not {params!r}")
        self.params = params
        self.n_buf = integer("acc_buffers", n_buf, 2, 16)
        job = cr_job_layout(params.rows, params.n_out, params.n_feat)
        super().__init__({
            **{f"mac{b}": In(AccPortSignature(params)) for b in range(params.lanes)},
            "issue":      In(1),
            "retire":     In(1),
            "retire_job": In(job),
            "retire_gate": In(params.n_tok, init=(1 << params.n_tok) - 1),
            "slot":       In(range(params.n_feat)),
            "writes_slot": Out(1),
            "full":       Out(1),
            "pending":    Out(1),
            "job":        Out(stream.Signature(engine_job_layout(params.rows, params.n_out,
                                                                 params.n_feat, params.n_tok))),
            "drain":      In(AccDrainSignature(params)),
        })

    def elaborate(self, platform):
        m = Module()
        p, n_buf, drain = self.params, self.n_buf, self.drain
        macs = [getattr(self, f"mac{b}") for b in range(p.lanes)]

        def after(k):
            return Mux(k == n_buf - 1, 0, k + 1)

        buf = Signal(range(n_buf))          # active buffer
        ebuf = Signal(range(n_buf))         # buffer of the engine's current or next reduction
        ebuf_next = Signal(range(n_buf))
        retired = Signal(range(n_buf))      # buffers handed to the engine and not yet reduced
        s1_buf, s2_buf = Signal(range(n_buf)), Signal(range(n_buf))
        m.d.comb += [ebuf_next.eq(after(ebuf)), self.full.eq(retired == n_buf - 1),
                     self.pending.eq(retired != 0)]
        with m.If(self.issue):
            m.d.sync += s1_buf.eq(buf)
        m.d.sync += s2_buf.eq(s1_buf)
        with m.If(self.retire):
            m.d.sync += buf.eq(after(buf))
        with m.If(drain.done):
            m.d.sync += ebuf.eq(ebuf_next)
        m.d.sync += retired.eq(retired + self.retire - drain.done)
        self._act_slots(m, buf, ebuf)

        crq = m.submodules.cr_fifo = SyncFIFO(width=len(self.job.payload.as_value()),
                                              depth=n_buf - 1)
        # An overlapped start reads its buffer in this cycle: not while a MAC reads it.
        mac_on_next = Cat(*(mac.read for mac in macs)).any() & (s1_buf == ebuf_next)
        m.d.comb += [
            crq.w_data.eq(Cat(self.retire_job, self.retire_gate)), crq.w_en.eq(self.retire),
            self.job.payload.eq(crq.r_data),
            self.job.valid.eq(crq.r_rdy & ~(drain.busy & mac_on_next)),
            crq.r_en.eq(self.job.valid & self.job.ready),
        ]

        # Which words of each buffer hold a sum: a MAC's write sets a word's bit, a buffer's
        # bits all clear as it becomes active (below; the engine has read every word of it).
        # A word whose bit is clear reads 0, so the engine's clears need no write port: each
        # bank is one memory written by its MAC alone. The bits are a LUT RAM too, a word of
        # ``tpb`` bits per buffer, and a ``fresh`` flag per buffer (all set at reset) says its
        # word is all clear whatever the RAM holds: the MAC's first write to the buffer writes
        # the word from 0 (a read-modify-write like every set), so a clear is one flip-flop.
        fresh = [Signal(n_buf, name=f"fresh{b}", init=(1 << n_buf) - 1) for b in range(p.lanes)]
        buf_next = after(buf)

        # The buffer the engine reads (or would: its address is presented before ``read`` is
        # known, ``read`` only loads the engine's register).
        engine_buf = Mux(drain.read_next, ebuf_next, ebuf)
        engine_data = []
        for b, mac in enumerate(macs):
            # One LUT RAM per bank, buffer ``k``'s words at ``k * tpb``: written by the MAC,
            # read asynchronously by the MAC and by the engine (two read ports) into the
            # reader's register (no block RAM clock-to-out in front of the engine's adders).
            acc = m.submodules[f"acc{b}"] = Memory(shape=p.fmt.acc_shape,
                                                   depth=n_buf * p.tpb, init=[])
            wp = acc.write_port()
            mac_rp = acc.read_port(domain="comb")
            engine_rp = acc.read_port(domain="comb")
            at = Cat(mac.write_index, s2_buf)
            flags = m.submodules[f"held{b}"] = Memory(shape=p.tpb, depth=n_buf, init=[])
            flags_wp = flags.write_port()
            mac_fp = flags.read_port(domain="comb")
            engine_fp = flags.read_port(domain="comb")
            mac_held = Signal(p.tpb, name=f"mac{b}_held")
            m.d.comb += [
                mac_fp.addr.eq(s2_buf), engine_fp.addr.eq(engine_buf),
                mac_held.eq(Mux(fresh[b].bit_select(s2_buf, 1), 0, mac_fp.data)),
                flags_wp.addr.eq(s2_buf), flags_wp.en.eq(mac.write),
                flags_wp.data.eq(mac_held | (Const(1, p.tpb) << mac.write_index)),
            ]
            m.d.comb += [
                wp.addr.eq(at), wp.data.eq(mac.write_data), wp.en.eq(mac.write),
                # the MAC's read-modify-write, all in one cycle: the word as it is (0 if not held)
                mac_rp.addr.eq(at),
                mac.data.eq(Mux(mac_held.bit_select(mac.write_index, 1), mac_rp.data, 0)),
                engine_rp.addr.eq(Cat(drain.read_index, engine_buf)),
            ]
            # The engine's word, registered as it is read and held until it reads again; it
            # takes what the MAC writes to that word in the same cycle (a transparent read: the
            # last token of a buffer retired in its AXPY's last cycle). No reset (it is loaded
            # before it is used): the flip-flops' reset input is free for the "not held" zero.
            engine_word = Signal(p.fmt.acc_shape, name=f"engine{b}_word", reset_less=True)
            hit = mac.write & (s2_buf == engine_buf) & (mac.write_index == drain.read_index)
            held_word = (~fresh[b].bit_select(engine_buf, 1)
                         & engine_fp.data.bit_select(drain.read_index, 1))
            with m.If(drain.read & (drain.read_bank == b)):
                with m.If(~hit & ~held_word):
                    m.d.sync += engine_word.eq(0)
                with m.Else():
                    m.d.sync += engine_word.eq(Mux(hit, mac.write_data, engine_rp.data))
            engine_data.append(engine_word)
        # The new active buffer's bits clear a cycle after the retire, from registers (not from
        # the dispatcher's late ``retire``): no MAC writes it before its first AXPY's tokens
        # land, two cycles after that AXPY issues, and the engine has finished reading it.
        clear, cleared = Signal(), Signal(range(n_buf))
        m.d.sync += [clear.eq(self.retire), cleared.eq(buf_next)]
        for b, mac in enumerate(macs):
            for k in range(n_buf):
                with m.If(clear & (cleared == k)):
                    m.d.sync += fresh[b][k].eq(1)
                with m.Elif(mac.write & (s2_buf == k)):
                    m.d.sync += fresh[b][k].eq(0)
        m.d.comb += drain.data.eq(Array(engine_data)[drain.add_bank])
        return m

    def _act_slots(self, m, buf, ebuf):
        """``writes_slot``: each buffer's CR_ACT (CR_DELTA) flag and ``X`` slot, from its retire
        (buffer ``buf``) until the engine is done with it (``ebuf``, at ``drain.done``)."""
        n_feat = self.params.n_feat
        act = Signal(self.n_buf)
        slots = [Signal(range(n_feat), name=f"act_slot{k}") for k in range(self.n_buf)]
        for k in range(self.n_buf):
            with m.If(self.retire & (buf == k)):
                m.d.sync += [act[k].eq(self.retire_job.act), slots[k].eq(self.retire_job.slot)]
            with m.Elif(self.drain.done & (ebuf == k)):
                m.d.sync += act[k].eq(0)
        m.d.comb += self.writes_slot.eq(Cat(act[k] & (slots[k] == self.slot)
                                            for k in range(self.n_buf)).any())
