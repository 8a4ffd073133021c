"""Small synchronous FIFOs in LUT RAM: one whose first two entries can both be read, and both
taken at once (:class:`PeekFIFO`), and a plain one (:class:`LutFIFO`)."""

from amaranth.hdl import C, Cat, Module, Mux, Shape, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .validate import integer

__all__ = ["PeekSignature", "PeekFIFO", "LutFIFO"]


class PeekSignature(wiring.Signature):
    """The read side of a :class:`PeekFIFO`, as its producer sees it.

    Members
    -------
    head, valid : Out
        The first entry and whether there is one.
    next, next_valid : Out
        What the FIFO keeps of the entry behind it (its ``peek_shape`` part) and whether there
        is one.
    take : In(1)
        Take the head.
    take2 : In(1)
        Take the head and the entry behind it (needs ``next_valid``; wins over ``take``).
    held : Out(held_shape)
        Only with a ``held_shape``: the head's ``held_shape`` part, from flip-flops.
    """

    def __init__(self, shape, peek_shape=None, held_shape=None):
        self.shape = shape
        self.peek_shape = shape if peek_shape is None else peek_shape
        self.held_shape = held_shape
        members = {
            "head": Out(shape), "valid": Out(1),
            "next": Out(self.peek_shape), "next_valid": Out(1),
            "take": In(1), "take2": In(1),
        }
        if held_shape is not None:
            members["held"] = Out(held_shape)
        super().__init__(members)


class PeekFIFO(wiring.Component):
    """First-word-fall-through FIFO of ``depth`` entries that also shows its second entry.

    The core's dispatcher uses it to see the command behind the one it runs: a carriage return
    right behind an AXPY is done in the AXPY's last cycle (``docs/pe.md``). An entry written in
    one cycle is readable in the next; one entry in a cycle, one or two out. The entries are
    LUT RAM read asynchronously: the head's from one memory, the next's from a second one that
    holds each entry's ``peek_shape`` part, written beside it (``w_peek``; the whole entry again
    without ``peek_shape``): the core keeps 9 bits of what its dispatcher needs to know about the
    command behind, not a second copy of 35 (LUT RAM, not flip-flops and two read
    multiplexers).
    The level is a thermometer of flip-flops (``fill``), not a count: ``valid``, ``next_valid``
    and ``w.ready`` are its bits (the ramp's accept depends on ``w.ready``), and each bit's next
    value is one of its neighbours', picked by the number taken and the write (no subtraction
    or comparison; the area: ``docs/fpga.md``).

    With a ``held_shape``, each entry's ``w_held`` part (written beside it) is also kept, while
    the entry is the head, in flip-flops (``r.held``): what the reader decides from first
    starts at a register, not behind the LUT RAM's read. The register is loaded as the cycle
    ends with the entry that will be the head, from a copy of those parts read at the two
    entries behind the head (one or two taken) or from ``w_held`` (the FIFO empties: whether or
    not it is written, so that ``w.valid`` is not on that path; ``held`` means nothing while
    the FIFO is empty); on the core's dispatcher that takes the command FIFO's read off the
    path from the AXPY's slot through the lane's nonzero mask to the pop, the tile's critical
    path.

    ``held_copies`` is how many copies of those parts the FIFO keeps for that. With 1, one
    memory with two read ports (the entries one and two behind the head); Yosys's ``share``
    pass merges those two reads, which are never used in the same cycle, into one port whose
    address the reader's late take selects, and that undoes the cut. With 2, each read has a
    memory of its own (the same words written to both), which cannot be merged: on the ECP5 a
    few distributed-RAM cells more for a shorter path (``docs/fpga.md``). The same values in
    the same cycles either way.

    Members
    -------
    w : In(stream.Signature(shape))
        Write side (``ready``: not full).
    w_peek : In(peek_shape)
        Only with a ``peek_shape``: the part of ``w.payload`` kept for ``r.next``.
    w_held : In(held_shape)
        Only with a ``held_shape``: the part of ``w.payload`` kept for ``r.held``.
    r : Out(PeekSignature(shape, peek_shape, held_shape))
        Read side: the first two entries.
    fill : Out(depth)
        Entries held, as a thermometer: bit ``k`` is set while more than ``k`` are.

    Parameters
    ----------
    shape, depth
        Each entry's shape and the number of entries (at least 2).
    peek_shape, held_shape
        The parts kept for ``r.next`` and for ``r.held`` (above), or ``None``.
    held_copies : int
        Copies of the ``held_shape`` parts kept for loading ``r.held``: 1 or 2 (above).
    """

    def __init__(self, shape, depth, peek_shape=None, held_shape=None, *, held_copies=1):
        depth = integer("depth", depth, 2)
        self.shape, self.depth, self.peek_shape = shape, depth, peek_shape
        self.held_shape = held_shape
        self.held_copies = integer("held_copies", held_copies, 1, 2)
        members = {
            "w": In(stream.Signature(shape)),
            "r": Out(PeekSignature(shape, peek_shape, held_shape)),
            "fill": Out(depth),
        }
        if peek_shape is not None:
            members["w_peek"] = In(peek_shape)
        if held_shape is not None:
            members["w_held"] = In(held_shape)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        D = self.depth
        store = m.submodules.store = Memory(shape=Shape.cast(self.shape).width, depth=D,
                                            init=[])
        head_port = store.read_port(domain="comb")
        if self.peek_shape is None:
            next_port, next_write, next_data = store.read_port(domain="comb"), None, None
        else:
            peek = m.submodules.peek = Memory(shape=Shape.cast(self.peek_shape).width, depth=D,
                                              init=[])
            next_port, next_write, next_data = peek.read_port(domain="comb"), \
                peek.write_port(), self.w_peek
        write_port = store.write_port()
        rd = Signal(range(D))
        wr = Signal(range(D))
        fill = self.fill

        def after(pointer, steps):
            total = pointer + steps
            return Mux(total >= D, total - D, total)

        taken = Signal(range(3))
        r = self.r
        ready = self.w.ready
        written = self.w.valid & ready
        m.d.comb += [
            r.valid.eq(fill[0]), r.next_valid.eq(fill[1]), self.w.ready.eq(~fill[D - 1]),
            head_port.addr.eq(rd), next_port.addr.eq(after(rd, 1)),
            r.head.eq(head_port.data), r.next.eq(next_port.data),
            taken.eq(Mux(r.take2 & r.next_valid, 2, r.take & r.valid)),
        ]
        # The free entry at ``wr`` takes the payload whether or not it is written (nothing
        # reads it until it is): its enable comes from registers, not from ``w.valid``.
        for port, payload in ((write_port, self.w.payload), (next_write, next_data)):
            if port is not None:
                m.d.comb += [port.addr.eq(wr), port.data.eq(payload), port.en.eq(ready)]
        head = behind = None
        if self.held_shape is not None:
            # the head's part in flip-flops: the entry that will be the head, from the copy
            # read at the two entries behind this one, or the one written now
            # (one read port a copy with two copies: two memories cannot be merged)
            copies = [Memory(shape=Shape.cast(self.held_shape).width, depth=D, init=[])
                      for _ in range(self.held_copies)]
            for k, copy in enumerate(copies):
                m.submodules[f"held_{k}" if k else "held"] = copy
                held_write = copy.write_port()
                m.d.comb += [held_write.addr.eq(wr), held_write.data.eq(self.w_held),
                             held_write.en.eq(ready)]
            behind = [copies[k % len(copies)].read_port(domain="comb") for k in range(2)]
            m.d.comb += [behind[0].addr.eq(after(rd, 1)), behind[1].addr.eq(after(rd, 2))]
            head = Signal(self.held_shape, reset_less=True)
            m.d.comb += r.held.eq(head)

        def filled(k):
            """Whether more than ``k`` entries are held (``k`` past either end: a constant)."""
            return C(1, 1) if k < 0 else C(0, 1) if k >= D else fill[k]

        # Every outcome is worked out from registers for each number of entries taken; the
        # reader's take (late: the dispatcher's decision) and the write (from the ramp) only
        # pick one: the thermometer shifted by ``t - written`` (no arithmetic after them).
        with m.Switch(taken):
            for t in range(3):
                with m.Case(t):
                    m.d.sync += rd.eq(after(rd, t))
                    with m.If(written):
                        m.d.sync += [wr.eq(after(wr, 1)),
                                     fill.eq(Cat(filled(k + t - 1) for k in range(D)))]
                    with m.Else():
                        m.d.sync += fill.eq(Cat(filled(k + t) for k in range(D)))
                    if head is None:
                        continue
                    # the next head: the entry ``t`` behind this one if there is one, else
                    # the entry written now, if any (nothing reads ``held`` while the FIFO is
                    # empty, so ``w.valid``, late in the cycle, need not decide it)
                    if t == 0:
                        with m.If(~fill[0]):
                            m.d.sync += head.eq(self.w_held)
                    else:
                        m.d.sync += head.eq(Mux(filled(t), behind[t - 1].data,
                                                self.w_held))
        return m


class LutFIFO(wiring.Component):
    """First-word-fall-through FIFO of ``depth`` entries, as ``amaranth.lib.fifo.SyncFIFO``
    (same cycles: an entry written in one cycle is readable in the next; no write while full,
    even in a cycle that reads) but cheaper: its "not full" and "not empty" are registers, set
    from the two pointers' next values (no level counter, no comparator behind ``w.ready``, no
    inverter behind either port), and the pointers of 4, 8 or 16 entries step through the
    addresses in a de Bruijn order (one LUT4 a pointer, not one a bit; the area:
    ``docs/fpga.md``).

    Members
    -------
    w : In(stream.Signature(shape))
        Write side (``ready``: not full).
    r : Out(stream.Signature(shape))
        Read side: the oldest entry.
    """

    def __init__(self, shape, depth):
        depth = integer("depth", depth, 1)
        self.shape, self.depth = shape, depth
        super().__init__({
            "w": In(stream.Signature(shape)),
            "r": Out(stream.Signature(shape)),
        })

    def elaborate(self, platform):
        m = Module()
        D = self.depth
        store = m.submodules.store = Memory(shape=Shape.cast(self.shape).width, depth=D,
                                            init=[])
        read_port, write_port = store.read_port(domain="comb"), store.write_port()
        rd, wr = Signal(range(D)), Signal(range(D))
        room, nonempty = Signal(init=1), Signal()      # not full, not empty, as the ports see them
        rd_next, wr_next = Signal.like(rd), Signal.like(wr)
        written = self.w.valid & room
        taken = self.r.ready & nonempty
        m.d.comb += [
            self.w.ready.eq(room), self.r.valid.eq(nonempty),
            write_port.addr.eq(wr), write_port.data.eq(self.w.payload), write_port.en.eq(written),
            read_port.addr.eq(rd), self.r.payload.eq(read_port.data),
        ]
        k = len(rd)
        for pointer, following in ((rd, rd_next), (wr, wr_next)):
            if D == 1 << k and 2 <= k <= 4:
                # Any order of the addresses does, the same for both pointers: a de Bruijn
                # counter (a shift register whose new bit is one LUT4 of its bits: the LFSR
                # x^k + x^(k-1) + 1, with the all-zero state let in) walks all 2^k of them,
                # where a binary increment costs a LUT4 a bit.
                new = pointer[k - 1] ^ pointer[k - 2] ^ (pointer[:k - 1] == 0)
                m.d.comb += following.eq(Cat(new, pointer[:k - 1]))
            elif D & (D - 1):
                m.d.comb += following.eq(Mux(pointer == D - 1, 0, pointer + 1))
            else:
                m.d.comb += following.eq(pointer + 1)        # wraps by itself
        with m.If(taken):
            m.d.sync += rd.eq(rd_next)
        # the write (from the ramp or a neighbour, late in the cycle) picks between outcomes
        # worked out from registers and the read
        with m.If(written):
            m.d.sync += [wr.eq(wr_next), nonempty.eq(1), room.eq(taken | (wr_next != rd))]
        with m.Else():
            m.d.sync += [room.eq(taken | room), nonempty.eq(nonempty & ~(taken & (rd_next == wr)))]
        return m
