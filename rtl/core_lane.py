"""One lane of the core: its bank of ``X``, the bank's nonzero masks and gate bits, the zero-skip
walk of an AXPY over them, and the lane's MAC."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .core_params import CoreParams
from .isa import MASK_CHUNK, MaskArg
from .mac import Mac
from .validate import integer

__all__ = ["AccPortSignature", "AxpyLane"]


def _at_most_one(bits):
    """``(any, several)`` of a value's bits, as a balanced tree of LUT-sized steps."""
    if len(bits) == 1:
        return bits[0], Const(0)
    half = len(bits) // 2
    (a, a2), (b, b2) = _at_most_one(bits[:half]), _at_most_one(bits[half:])
    return a | b, a2 | b2 | (a & b)


class AccPortSignature(wiring.Signature):
    """A lane's MAC to its bank of the accumulator buffers (the MAC's side).

    The whole read-modify-write of a token's accumulator is in ``s2``: the accumulator is read
    asynchronously and the sum written back at the end of the cycle, so the next token's read,
    a cycle later, sees it (no forwarding).

    Members
    -------
    read : Out(1)
        ``s1``: a token is one stage from its accumulator (of the buffer the AXPY was issued
        to): the buffers keep the partial-sum engine off that buffer for the cycle.
    write, write_index : Out
        ``s2``: read-modify-write the accumulator of bank index ``write_index``.
    data : In(acc_shape)
        ``s2``: that accumulator (combinational).
    write_data : Out(acc_shape)
        ``s2``: the sum, written back at the end of the cycle.
    """

    def __init__(self, params):
        super().__init__({
            "read":        Out(1),
            "write":       Out(1),
            "write_index": Out(range(params.tpb)),
            "data":        In(params.fmt.acc_shape),
            "write_data":  Out(params.fmt.acc_shape),
        })


class AxpyLane(wiring.Component):
    """Bank ``b`` of the core: tokens ``t`` with ``t % lanes == b``, at index ``t // lanes``.

    Holds the bank's ``X`` (``n_feat * tpb`` operands), a ``tpb``-bit nonzero mask per feature (read
    combinationally at ``feature``) and the bank's bits of the core's **gate** (a register, all ones
    after reset; ``docs/pe.md``, MASK and TOKENS). A LOAD writes one operand and its mask bit; so
    does the partial-sum engine's CR_ACT or CR_DELTA (``x_write``: a second read port of the masks,
    at ``x_slot``, for its read-modify-write; the write ports are the LOAD's, which never runs at
    once). An AXPY walks the tokens of the slot's mask whose gate bit is set, lowest first, one a
    cycle (``walk``): the first cycle takes ``mask & gate`` (none with a zero ``weight``), later
    ones (``active``) what is left; ``done`` says nothing is left after this cycle's token. An AXPY
    of :data:`~rtl.isa.ONES_SLOT` (``ones``) reads every mask bit as 1 and the format's one as every
    operand. A MASK (``gate_write``) sets the gate bits of the chunk's tokens in this bank (index
    ``i`` holds token ``i * lanes + bank``, written from bit ``t % 16`` when the chunk is ``t //
    16``: constants per bit); ``gate_reset`` (a carriage return taking effect, or TOKENS) loads the
    bank's bits of the core's active tokens, ``gate_open``. Both take effect at the end of the
    cycle, so the next AXPY's first cycle sees them. Each token goes through the lane's
    :class:`~rtl.mac.Mac`: ``X`` is read in the walk cycle, multiplied by the weight in the next
    (``s1``), and the product added to the accumulator, read and written back in the one after
    (``s2``).

    Latency: a token's sum is written 2 cycles after its walk cycle. Throughput: one token a
    cycle. Bad input: the dispatcher checks slots, LOAD addresses and MASK chunks before it
    asks (a chunk with none of the bank's tokens would change no gate bit).

    Parameters
    ----------
    params : CoreParams
    bank : int
        Which bank (``0 .. lanes-1``): it names the memories (``x{bank}``, ``mask{bank}``).

    Members
    -------
    feature : In(range(n_feat))
        The feature whose mask is read: the AXPY's slot or the LOAD's feature.
    nonzero : Out(range(tpb + 1))
        Nonzero tokens of ``feature`` in this bank whose gate bit is set.
    walk, active, weight, zero_weight : In
        Issue this cycle's token of an AXPY of ``weight`` on ``feature``; ``active``: not its
        first cycle.
    done : Out(1)
        This bank has no token left after this cycle's.
    ones : In(1)
        The AXPY is of the ones slot: ``feature``'s mask reads all ones, ``X`` the format's
        one.
    load, load_index, load_value, load_zero : In
        LOAD: ``X[feature][load_index] := load_value`` and its mask bit, ``~load_zero``
        (whether ``load_value`` is zero: the core has it in flip-flops, the command FIFO's
        held part, so the lane does not work it out again from the value).
    x_write, x_slot, x_index, x_value : In
        CR_ACT, CR_DELTA: ``X[x_slot][x_index] := x_value`` and its mask bit (``x_value`` not
        zero); never with ``load``.
    gate_write, gate_arg : In
        MASK: the gate bits of this bank's tokens in chunk ``gate_arg.chunk`` := their bits of
        ``gate_arg.bits`` (``gate_arg.col`` is not looked at: the input sorter filtered it).
    gate_reset, gate_open : In
        The gate := ``gate_open`` (this bank's bits of the active tokens; wins over
        ``gate_write``: the dispatcher never asks both at once).
    gate : Out(tpb)
        The gate bits now (a carriage return hands them to the engine with its buffer).
    read, read_address : In
        READ: fetch ``X`` word ``read_address`` (``feature * tpb + index``); ``x_data`` in the
        next cycle, held until the bank's ``X`` is read again.
    x_data : Out(operand_shape)
    busy : Out(1)
        A token in ``s1`` or ``s2``.
    acc : Out(AccPortSignature(params))
        To the lane's accumulators.
    overflow : Out(1)
        The MAC overflowed this cycle (saturated; in bf16, made a finite accumulator ``±inf``
        or NaN).
    """

    def __init__(self, params, bank=0):
        if not isinstance(params, CoreParams):
            raise TypeError(f"params must be a CoreParams, not {params!r}")
        self.params = params
        self.bank = integer("bank", bank, 0, params.lanes - 1)
        fmt, tpb = params.fmt, params.tpb
        super().__init__({
            "feature":      In(range(params.n_feat)),
            "nonzero":      Out(range(tpb + 1)),
            "walk":         In(1),
            "active":       In(1),
            "weight":       In(fmt.operand_shape),
            "zero_weight":  In(1),
            "done":         Out(1),
            "ones":         In(1),
            "load":         In(1),
            "load_index":   In(range(tpb)),
            "load_value":   In(fmt.operand_shape),
            "load_zero":    In(1),
            "x_write":      In(1),
            "x_slot":       In(range(params.n_feat)),
            "x_index":      In(range(tpb)),
            "x_value":      In(fmt.operand_shape),
            "gate_write":   In(1),
            "gate_arg":     In(MaskArg),
            "gate_reset":   In(1),
            "gate_open":    In(tpb, init=(1 << tpb) - 1),
            "gate":         Out(tpb),
            "read":         In(1),
            "read_address": In(range(params.n_feat * tpb)),
            "x_data":       Out(fmt.operand_shape),
            "busy":         Out(1),
            "acc":          Out(AccPortSignature(params)),
            "overflow":     Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        p, fmt, tpb = self.params, self.params.fmt, self.params.tpb
        x = m.submodules[f"x{self.bank}"] = Memory(shape=fmt.operand_shape,
                                                   depth=p.n_feat * tpb, init=[])
        masks = m.submodules[f"mask{self.bank}"] = Memory(shape=tpb, depth=p.n_feat, init=[])
        x_rp, x_wp = x.read_port(), x.write_port()
        mask_rp, mask_wp = masks.read_port(domain="comb"), masks.write_port()
        mask_xp = masks.read_port(domain="comb")  # the engine's CR_ACT/DELTA, at its slot
        mac = m.submodules.mac = Mac(fmt)
        mask = mask_rp.data

        # The gate: bank index i is token t = i * lanes + bank, in chunk t // 16 at bit t % 16.
        gate = Signal(tpb, init=(1 << tpb) - 1)
        chunks = {(i * p.lanes + self.bank) // MASK_CHUNK for i in range(tpb)}
        hit = {k: Signal(name=f"gate_chunk{k}") for k in chunks}
        for k, signal in hit.items():
            m.d.comb += signal.eq(self.gate_arg.chunk == k)
        m.d.comb += self.gate.eq(gate)
        with m.If(self.gate_reset):
            m.d.sync += gate.eq(self.gate_open)
        with m.Elif(self.gate_write):
            for i in range(tpb):
                t = i * p.lanes + self.bank
                with m.If(hit[t // MASK_CHUNK]):
                    m.d.sync += gate[i].eq(self.gate_arg.bits[t % MASK_CHUNK])
        # the tokens an AXPY of ``feature`` multiplies (of the ones slot: every gated one)
        live = (mask | self.ones.replicate(tpb)) & gate
        m.d.comb += [mask_rp.addr.eq(self.feature), self.x_data.eq(x_rp.data),
                     self.nonzero.eq(sum(live[i] for i in range(tpb)))]

        # LOAD, or the engine's CR_ACT: the operand and its mask bit (read, modify, write in
        # one cycle). The dispatcher holds a LOAD while the engine is busy: never both.
        bit = Const(1, tpb) << self.load_index
        x_bit = Const(1, tpb) << self.x_index
        x_zero = fmt.is_zero(self.x_value)
        m.d.comb += [
            mask_xp.addr.eq(self.x_slot),
            x_wp.addr.eq(Mux(self.x_write, Cat(self.x_index, self.x_slot),
                             Cat(self.load_index, self.feature))),
            x_wp.data.eq(Mux(self.x_write, self.x_value, self.load_value)),
            x_wp.en.eq(self.load | self.x_write),
            mask_wp.addr.eq(Mux(self.x_write, self.x_slot, self.feature)),
            mask_wp.en.eq(self.load | self.x_write),
            mask_wp.data.eq(Mux(self.x_write,
                                Mux(x_zero, mask_xp.data & ~x_bit, mask_xp.data | x_bit),
                                Mux(self.load_zero, mask & ~bit, mask | bit))),
        ]

        # The walk: the lowest remaining nonzero token, one a cycle.
        remaining = Signal(tpb)
        candidates = Signal(tpb)
        m.d.comb += candidates.eq(Mux(self.active, remaining, Mux(self.zero_weight, 0, live)))
        lowest = (candidates & (~candidates + 1))[:tpb]
        index = Signal(range(tpb))
        for i in reversed(range(tpb)):
            with m.If(lowest[i]):
                m.d.comb += index.eq(i)
        left = candidates & ~lowest
        # done: at most one candidate, from a tree of (any, more than one) pairs, not from
        # ``left`` (a carry chain): it decides the dispatcher's pop, the tile's critical path
        m.d.comb += self.done.eq(~_at_most_one(candidates)[1])

        # s1: X read returned; s2: the accumulator read, added to and written (the MAC's two
        # stages).
        s1_valid, s1_index, s2_index = Signal(), Signal(range(tpb)), Signal(range(tpb))
        s1_weight, s1_ones = Signal(fmt.operand_shape), Signal()
        m.d.sync += s1_valid.eq(0)
        with m.If(self.walk):
            m.d.sync += [s1_valid.eq(candidates != 0), s1_index.eq(index),
                         remaining.eq(left), s1_weight.eq(self.weight), s1_ones.eq(self.ones)]
        m.d.comb += [
            x_rp.addr.eq(Mux(self.walk, Cat(index, self.feature), self.read_address)),
            x_rp.en.eq((self.walk & (candidates != 0)) | self.read),
        ]
        m.d.sync += s2_index.eq(s1_index)
        m.d.comb += [
            mac.valid.eq(s1_valid), mac.a.eq(s1_weight),
            mac.b.eq(Mux(s1_ones, fmt.one, x_rp.data)),
            self.acc.read.eq(s1_valid), mac.acc.eq(self.acc.data),
            self.acc.write.eq(mac.s1_valid), self.acc.write_index.eq(s2_index),
            self.acc.write_data.eq(mac.sum),
            self.busy.eq(s1_valid | mac.s1_valid),
            self.overflow.eq(mac.overflow),
        ]
        return m
