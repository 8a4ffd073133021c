"""The core's accumulator buffers: one bank per lane in each buffer, the active buffer the MACs
add into, and the queue of retired buffers the partial-sum engine reduces."""

from amaranth.hdl import Array, Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .core_lane import AccPortSignature
from .core_params import CoreParams
from .isa import cr_job_layout
from .psum import AccDrainSignature
from .validate import integer

__all__ = ["AccBuffers"]


class AccBuffers(wiring.Component):
    """``n_buf`` accumulator buffers of ``n_tok`` sums, each split into ``lanes`` banks.

    The MACs add into the active buffer (the one current at the AXPY's ``issue``). ``retire``
    (a carriage return) hands the active buffer, with its job, to the engine's queue and makes
    the next one active; the engine reduces retired buffers oldest first, zeroing them as it
    reads them. A buffer retired in the last issue cycle of an AXPY may still have that AXPY's
    last token one stage into a MAC: the engine waits a cycle before it starts on that buffer
    while finishing another (an idle engine reads it a cycle later anyway).

    Each bank of each buffer is a small LUT RAM read asynchronously, by its lane's MAC or by
    the engine when that MAC does not, into the reader's register (one per lane for the MAC,
    one per bank for the engine), which takes what a MAC writes to that word in the same cycle
    (a transparent read); written by the MAC, or cleared by the engine. Block RAM put its
    clock-to-out and the buffer multiplexer in front of the engine's adders: the tile's
    critical path (``docs/pe.md``, "Implementation notes").

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
    retire, retire_job : In
        Hand the active buffer to the engine with its job (``cr_job_layout``); only while not
        ``full``.
    full : Out(1)
        Every buffer but the active one waits for the engine.
    pending : Out(1)
        Some buffer waits for the engine or is being reduced.
    job : Out(stream.Signature(cr_job_layout(rows, n_out)))
        The oldest retired buffer's job, to the engine.
    drain : In(AccDrainSignature(params))
        The engine reading and clearing the buffer it reduces.
    """

    def __init__(self, params, n_buf):
        if not isinstance(params, CoreParams):
            raise TypeError(f"params must be a CoreParams, not {params!r}")
        self.params = params
        self.n_buf = integer("acc_buffers", n_buf, 2, 16)
        job = cr_job_layout(params.rows, params.n_out)
        super().__init__({
            **{f"mac{b}": In(AccPortSignature(params)) for b in range(params.lanes)},
            "issue":      In(1),
            "retire":     In(1),
            "retire_job": In(job),
            "full":       Out(1),
            "pending":    Out(1),
            "job":        Out(stream.Signature(job)),
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

        crq = m.submodules.cr_fifo = SyncFIFO(width=len(self.retire_job.as_value()),
                                              depth=n_buf - 1)
        # An overlapped start reads its buffer in this cycle: not while a MAC reads it.
        mac_on_next = Cat(*(mac.read for mac in macs)).any() & (s1_buf == ebuf_next)
        m.d.comb += [
            crq.w_data.eq(self.retire_job), crq.w_en.eq(self.retire),
            self.job.payload.eq(crq.r_data),
            self.job.valid.eq(crq.r_rdy & ~(drain.busy & mac_on_next)),
            crq.r_en.eq(self.job.valid & self.job.ready),
        ]

        def read(raw, mac, k, index):
            """Word ``index`` of buffer ``k`` as this cycle's MAC write leaves it (a transparent
            read: the reader's register takes it). The engine never clears a word that is read
            in the same cycle: a MAC reads a retired buffer at most one cycle after its retire,
            before the engine's first clear, and the engine reads one token while it clears the
            one before."""
            hit = mac.write & (s2_buf == k) & (mac.write_index == index)
            return Mux(hit, mac.write_data, Array(raw)[k])

        # The buffer the engine reads (or would: its address is presented before ``read`` is
        # known, ``read`` only loads the engine's register).
        engine_buf = Mux(drain.read_next, ebuf_next, ebuf)
        engine_data = []
        for b, mac in enumerate(macs):
            raw = []                        # each buffer's bank b, read combinationally
            for k in range(n_buf):
                # Distributed (LUT) RAM read asynchronously into a register after the buffer
                # mux: no block RAM clock-to-out and no mux in front of the engine's adders
                # (the tile's critical path, docs/fpga.md).
                acc = m.submodules[f"acc{b}_{k}"] = Memory(shape=p.fmt.acc_shape, depth=p.tpb,
                                                           init=[])
                wp = acc.write_port()
                rp = acc.read_port(domain="comb")
                raw.append(rp.data)
                m.d.comb += rp.addr.eq(0)
                with m.If(mac.read & (s1_buf == k)):
                    m.d.comb += rp.addr.eq(mac.read_index)
                with m.Elif((engine_buf == k) & (drain.read_bank == b)):
                    m.d.comb += rp.addr.eq(drain.read_index)
                mac_writes = mac.write & (s2_buf == k)
                clears = drain.clear & (ebuf == k) & (drain.clear_bank == b)
                m.d.comb += [
                    wp.addr.eq(Mux(mac_writes, mac.write_index, drain.clear_index)),
                    wp.data.eq(Mux(mac_writes, mac.write_data, 0)),
                    wp.en.eq(mac_writes | clears),
                ]

            # Each reader's word, registered as it is read and held until it reads again.
            mac_word = Signal(p.fmt.acc_shape, name=f"mac{b}_word")
            engine_word = Signal(p.fmt.acc_shape, name=f"engine{b}_word")
            with m.If(mac.read):
                m.d.sync += mac_word.eq(read(raw, mac, s1_buf, mac.read_index))
            with m.If(drain.read & (drain.read_bank == b)):
                m.d.sync += engine_word.eq(read(raw, mac, engine_buf,
                                                drain.read_index))
            m.d.comb += mac.data.eq(mac_word)
            engine_data.append(engine_word)
        m.d.comb += drain.data.eq(Array(engine_data)[drain.clear_bank])
        return m
