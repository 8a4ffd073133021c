"""Formal specs of the FIFOs: :class:`~rtl.peek_fifo.LutFIFO` and :class:`~rtl.peek_fifo.PeekFIFO`.

The tracked-entry pattern (Amaranth's own FIFO proofs): the solver picks, at any write, an
arbitrary entry ``a1``, and at any later write an arbitrary ``a2``. A model level counts what
went in and out. Proven, for every sequence of writes, reads (and, for ``PeekFIFO``, double
takes) the solver can pick:

- the flags follow the level (``w.ready``: not full; ``r.valid``: not empty; ``next_valid``:
  two or more; ``fill`` the level's thermometer), so nothing is written over or read twice;
- each tracked entry reaches the head after exactly the entries written before it have been
  read, and is read back unchanged (``r.payload`` / ``head``; ``next`` when it is second;
  ``held`` when it is the head), ``a1`` before ``a2``: nothing lost, invented, or reordered.

By k-induction: the spec also asserts helper invariants that tie the FIFO's pointers and
storage to the model (white-box: the pointers found as what drives the memory ports' addresses,
the storage through a read port of the spec's own), so that every state the induction starts
from is one the FIFO can reach.
"""

from amaranth.asserts import AnyConst, AnySeq
from amaranth.hdl import Array, Assert, Assume, Const, Cover, Elaboratable, Module, Mux, Signal

from .sby import Inside

__all__ = ["FIFOSpec", "pointer_order"]


def pointer_order(depth):
    """The order in which a :class:`LutFIFO` pointer of ``depth`` entries visits the addresses
    (a de Bruijn counter for 4, 8 or 16 entries, else counting up): the ordinal of each."""
    k = max((depth - 1).bit_length(), 1)
    if depth == 1 << k and 2 <= k <= 4:
        seq, p = [], 0
        for _ in range(depth):
            seq.append(p)
            bits = [(p >> i) & 1 for i in range(k)]
            new = bits[k - 1] ^ bits[k - 2] ^ int(p & ((1 << (k - 1)) - 1) == 0)
            p = ((p << 1) | new) & ((1 << k) - 1)
        assert sorted(seq) == list(range(depth)), seq
    else:
        seq = list(range(depth))
    ordinal = [0] * depth
    for i, p in enumerate(seq):
        ordinal[p] = i
    return ordinal


class FIFOSpec(Elaboratable):
    """Tracked-entry spec of a ``LutFIFO`` (``kind="lut"``) or ``PeekFIFO`` (``kind="peek"``,
    with a ``held_shape`` part equal to the whole entry, so ``held`` is checked too).

    ``module`` is the ``wse.rtl.peek_fifo`` module (or a mutant of it)."""

    def __init__(self, module, kind, depth, width=4, *, invariants=True):
        self.module, self.kind, self.depth, self.width = module, kind, depth, width
        self.invariants = invariants

    def elaborate(self, platform):
        m = Module()
        D, W = self.depth, self.width
        if self.kind == "lut":
            dut = self.module.LutFIFO(W, D)
        else:
            dut = self.module.PeekFIFO(W, D, held_shape=W)
        inside_dut = Inside(dut, platform)
        driver, subs = inside_dut.driver, inside_dut.subs
        m.submodules.dut = inside_dut.module
        peek = self.kind == "peek"

        # The environment: free writes, reads, payloads.
        w_valid, w_data = AnySeq(1), AnySeq(W)
        m.d.comb += [dut.w.valid.eq(w_valid), dut.w.payload.eq(w_data)]
        if peek:
            take, take2 = AnySeq(1), AnySeq(1)
            m.d.comb += [dut.r.take.eq(take), dut.r.take2.eq(take2), dut.w_held.eq(w_data)]
            head, valid, second = dut.r.head, dut.r.valid, dut.r.next
        else:
            ready = AnySeq(1)
            m.d.comb += dut.r.ready.eq(ready)
            head, valid = dut.r.payload, dut.r.valid
            second = head           # (never asked: a LutFIFO takes one at a time)

        # The model: the level, and what this cycle writes and takes.
        level = Signal(range(D + 1))
        written = Signal()
        taken = Signal(range(3))
        m.d.comb += written.eq(w_valid & (level < D))
        if peek:
            m.d.comb += taken.eq(Mux(take2 & (level >= 2), 2, take & (level >= 1)))
        else:
            m.d.comb += taken.eq(ready & (level >= 1))
        m.d.sync += level.eq(level + written - taken)
        m.d.comb += [Assert(dut.w.ready == (level < D)), Assert(valid == (level > 0)),
                     Assert(level <= D)]
        if peek:
            m.d.comb += [Assert(dut.r.next_valid == (level >= 2)),
                         Assert(dut.fill == Array(Const((1 << k) - 1, D)
                                                  for k in range(D + 1))[level])]

        # Two tracked entries: `a1` written when the solver says (`pick`), `a2` at a later write.
        a = [AnyConst(W), AnyConst(W)]
        pick = AnySeq(2)
        inside = [Signal(name=f"in{k + 1}") for k in range(2)]
        done = [Signal(name=f"done{k + 1}") for k in range(2)]
        pos = [Signal(range(D), name=f"pos{k + 1}") for k in range(2)]   # entries ahead
        addr = [Signal(range(D), name=f"addr{k + 1}") for k in range(2)]
        ptr_bits = max((D - 1).bit_length(), 1)
        store = subs["store"]
        wr = driver(store.write_ports[0].addr)
        rd = driver(store.read_ports[0].addr)
        enter = [written & pick[0] & ~inside[0] & ~done[0],
                 written & pick[1] & (inside[0] | done[0]) & ~inside[1] & ~done[1]]
        for k in range(2):
            with m.If(enter[k]):
                m.d.comb += Assume(w_data == a[k])
                m.d.sync += [inside[k].eq(1), pos[k].eq(level - taken), addr[k].eq(wr)]
            with m.If(inside[k]):
                # read out: at the head when one is taken, or second of a double take
                with m.If((pos[k] == 0) & (taken >= 1)):
                    m.d.comb += Assert(head == a[k])
                    if peek:
                        m.d.comb += Assert(dut.r.held == a[k])
                    m.d.sync += [inside[k].eq(0), done[k].eq(1)]
                with m.Elif((pos[k] == 1) & (taken == 2)):
                    m.d.comb += Assert(second == a[k])
                    m.d.sync += [inside[k].eq(0), done[k].eq(1)]
                with m.Else():
                    m.d.sync += pos[k].eq(pos[k] - taken)
                # shown whenever it is the head (or second), taken or not
                with m.If(pos[k] == 0):
                    m.d.comb += Assert(head == a[k])
                    if peek:
                        m.d.comb += Assert(dut.r.held == a[k])
                if peek:
                    with m.If(pos[k] == 1):
                        m.d.comb += Assert(dut.r.next == a[k])
                m.d.comb += Assert(pos[k] < level)
        m.d.comb += [Assert(~(inside[0] & done[0])), Assert(~(inside[1] & done[1])),
                     Assert(~(inside[1] | done[1]) | done[0] | inside[0]),
                     Assert(~(inside[0] & inside[1]) | (pos[0] < pos[1])),
                     Assert(~done[1] | done[0])]

        if self.invariants:
            # Helper invariants (white-box): pointers and storage agree with the model.
            if peek:
                order = list(range(D))
            else:
                order = pointer_order(D)
            ordinal = Array(Const(o, ptr_bits) for o in order)

            def distance(frm, to):      # steps from pointer `frm` to pointer `to`
                diff = Signal(range(2 * D), name="dist")
                m.d.comb += diff.eq(ordinal[to] + D - ordinal[frm])
                return Mux(diff >= D, diff - D, diff)

            m.d.comb += [Assert(rd < D), Assert(wr < D),
                         Assert(distance(rd, wr) == Mux(level == D, 0, level))]
            if not peek:
                m.d.comb += [Assert(driver(dut.r.valid) == (level > 0)),
                             Assert(driver(dut.w.ready) == (level < D))]
            stores = [subs["store"]] + ([subs["held"]] if peek else [])
            for k in range(2):
                for store in stores:
                    port = store.read_port(domain="comb")
                    m.d.comb += port.addr.eq(addr[k])
                    with m.If(inside[k]):
                        m.d.comb += Assert(port.data == a[k])
                with m.If(inside[k]):
                    m.d.comb += [Assert(addr[k] < D), Assert(distance(rd, addr[k]) == pos[k])]
            if peek:
                # the head's held part is a register: it holds the head's entry
                held_port = subs["held"].read_port(domain="comb")
                m.d.comb += held_port.addr.eq(rd)
                with m.If(level > 0):
                    m.d.comb += Assert(dut.r.held == held_port.data)

        # Covers: full; both tracked entries read back; (PeekFIFO) both at once.
        m.d.comb += [Cover(level == D), Cover(done[1]),
                     Cover(written & (taken != 0) & (level == D - 1))]
        if peek:
            m.d.comb += Cover(inside[0] & inside[1] & (taken == 2) & (pos[0] == 0))
        return m

