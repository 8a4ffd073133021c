"""The zero-skip multiply-accumulate unit."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .bfloat import NEG_ZERO32, BFloat16
from .numfmt import FixedPoint

__all__ = ["Mac"]


class Mac(wiring.Component):
    """Multiply-accumulate that marks the operations with a zero operand.

    Two stages. ``s0``: operands ``a`` and ``b`` arrive with ``valid``; their product is
    registered, and an operation with a zero operand is marked skipped (its product is zero,
    so its sum is ``acc`` and it never overflows: no multiplexer after the adder, which a
    product register held over a skipped operation needed). ``s1``, one cycle later: the
    accumulator value ``acc`` for that operation is supplied, and ``sum`` = ``acc + a * b``
    (fixed point: saturated to the accumulator; bf16: the binary32 sum, rounded) is valid
    combinationally, with ``skip`` and ``overflow`` strobes for that operation. The core skips
    zeros before they reach the MAC (its walk issues only nonzero activations, and nothing with
    a zero weight).

    In bf16 the product of a ``±0`` operand is ``±0`` or NaN (``0 x inf``), and ``+0`` would
    turn an ``acc`` of ``-0`` into ``+0``: a skipped operation registers ``-0`` instead, the
    additive identity, so its sum is ``acc`` (a NaN ``acc`` comes out as the canonical NaN, the
    only NaN the arithmetic makes).

    Latency: 1 cycle from operands to ``sum`` (the accumulator is read in ``s1``, so a memory
    read issued with the operands lines up). Throughput: one operation per cycle.

    The number format is a parameter (:class:`~rtl.numfmt.FixedPoint` by default); the MAC
    only calls its ``is_zero``, ``multiply`` and ``accumulate``.

    Parameters
    ----------
    fmt : FixedPoint or BFloat16
        Number format of operands and accumulator.

    Members
    -------
    valid : In(1)
        ``s0``: ``a`` and ``b`` hold an operation.
    a, b : In(fmt.operand_shape)
        ``s0``: operands.
    acc : In(fmt.acc_shape)
        ``s1``: accumulator value the operation adds to.
    clear : In(1)
        Clears the sticky ``overflowed`` flag.
    s1_valid : Out(1)
        ``s1``: an operation is in ``s1``; ``sum`` is its result.
    sum : Out(fmt.acc_shape)
        ``s1``: ``acc + a * b`` (``acc`` unchanged when skipped).
    skip : Out(1)
        ``s1``: the operation in ``s1`` was skipped (an operand was zero; no multiply).
    overflow : Out(1)
        ``s1``: the operation in ``s1`` saturated (bf16: turned a finite ``acc`` into ``±inf``
        or NaN).
    overflowed : Out(1)
        Sticky: some operation overflowed since reset or ``clear``.
    """

    def __init__(self, fmt=None):
        fmt = FixedPoint() if fmt is None else fmt
        if not isinstance(fmt, (FixedPoint, BFloat16)):
            raise TypeError(f"Number format must be a FixedPoint or a BFloat16, not {fmt!r}")
        self.fmt = fmt
        super().__init__({
            "valid":      In(1),
            "a":          In(fmt.operand_shape),
            "b":          In(fmt.operand_shape),
            "acc":        In(fmt.acc_shape),
            "clear":      In(1),
            "s1_valid":   Out(1),
            "sum":        Out(fmt.acc_shape),
            "skip":       Out(1),
            "overflow":   Out(1),
            "overflowed": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        fmt = self.fmt

        s0_skip = fmt.is_zero(self.a) | fmt.is_zero(self.b)
        s1_product = Signal(fmt.product_shape, reset_less=True)     # read only with s1_valid
        m.d.sync += [
            self.s1_valid.eq(self.valid),
            self.skip.eq(self.valid & s0_skip),
        ]
        product = fmt.multiply(self.a, self.b, m=m)
        if fmt.is_float:
            product = Mux(s0_skip, NEG_ZERO32, product)     # acc + -0 is acc, even -0
        with m.If(self.valid):
            m.d.sync += s1_product.eq(product)

        total, saturated = fmt.accumulate(self.acc, s1_product, m=m)
        m.d.comb += [self.sum.eq(total), self.overflow.eq(self.s1_valid & saturated)]

        with m.If(self.clear):
            m.d.sync += self.overflowed.eq(0)
        with m.Elif(self.overflow):
            m.d.sync += self.overflowed.eq(1)
        return m
