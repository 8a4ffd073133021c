"""The router's crossbar: each output copies the payload of the input its one-hot select names."""

from amaranth.hdl import Module, Signal, Value
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from . import validate
from .validate import count

__all__ = ["Crossbar"]


class Crossbar(wiring.Component):
    """``n_in`` x ``n_out`` one-hot crossbar of ``shape`` payloads (an AND-OR mux per output).

    ``pairs`` lists the ``(input, output)`` connections that exist (all by default); an output
    with four inputs instead of five is about half the logic on an ECP5 (a 4:1 mux fits a
    slice, a 5:1 needs two). A select bit of a missing pair is ignored.

    Members
    -------
    inputs : In(ArrayLayout(shape, n_in))
    select : In(ArrayLayout(n_in, n_out))
        ``select[o]``: one-hot input of output ``o``; zero gives zero.
    outputs : Out(ArrayLayout(shape, n_out))
    """

    def __init__(self, shape, n_in=5, n_out=5, *, pairs=None):
        self.shape = shape
        self.n_in, self.n_out = count("n_in", n_in), count("n_out", n_out)
        self.pairs = validate.pairs("pairs", pairs, self.n_in, self.n_out)
        super().__init__({
            "inputs": In(data.ArrayLayout(shape, self.n_in)),
            "select": In(data.ArrayLayout(self.n_in, self.n_out)),
            "outputs": Out(data.ArrayLayout(shape, self.n_out)),
        })

    def elaborate(self, platform):
        m = Module()
        width = len(Value.cast(self.inputs[0]))
        for o in range(self.n_out):
            terms = []
            for i in (i for i in range(self.n_in) if (i, o) in self.pairs):
                term = Signal(width, name=f"o{o}_i{i}")
                m.d.comb += term.eq(Value.cast(self.inputs[i])
                                    & self.select[o][i].replicate(width))
                terms.append(term)
            if not terms:
                continue
            total = terms[0]
            for term in terms[1:]:
                total = total | term
            m.d.comb += self.outputs[o].eq(total)
        return m
