"""The router's crossbar: each output copies the payload of the input its one-hot select names."""

from amaranth.hdl import Module, Mux, Signal, Value
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from . import validate
from .validate import count
from .wavelet import N_PORTS

__all__ = ["Crossbar", "MUXES"]

#: How each output's multiplexer is built (``Crossbar(mux=...)``).
MUXES = ("and_or", "binary")


class Crossbar(wiring.Component):
    """``n_in`` x ``n_out`` one-hot crossbar of ``shape`` payloads (a multiplexer per output).

    ``pairs`` lists the ``(input, output)`` connections that exist (all by default); an output
    with four inputs instead of five is about half the logic on an ECP5 (a 4:1 mux fits a
    slice, a 5:1 needs two). A select bit of a missing pair is ignored.

    ``mux`` says how an output's multiplexer is built:

    - ``"and_or"``: each input ANDed with its select bit, the terms ORed; a zero select gives
      zero. On the ECP5, Yosys maps a bit of a 4-input output to three LUT4s with
      ``-nowidelut`` (the ULX3S's option), and to more with wide LUTs (``docs/fpga.md``).
    - ``"binary"``: an output with exactly four inputs ``a, b, c, d`` (an output of a router
      without U-turns) is a tree of 2:1 multiplexers, ``s1 ? (s0 ? d : c) : (s0 ? b : a)``, its
      selects the one-hot select's bits encoded (``s0``: ``b`` or ``d``, ``s1``: ``c`` or
      ``d``); a zero select gives ``a``, not zero (a register behind the crossbar loads the
      payload of an output whose ``valid`` is low). The ECP5 builds map such a tree to two
      LUT4s and the slice's own multiplexer (``PFUMX``) a bit instead of three LUT4s
      (:func:`fpga.build.before_lut_mapping`). Outputs with another number of inputs stay AND-OR.

    Members
    -------
    inputs : In(ArrayLayout(shape, n_in))
    select : In(ArrayLayout(n_in, n_out))
        ``select[o]``: one-hot input of output ``o``; zero gives zero (``"binary"``: the
        first input, on an output of four).
    outputs : Out(ArrayLayout(shape, n_out))
    """

    def __init__(self, shape, n_in=N_PORTS, n_out=N_PORTS, *, pairs=None, mux="and_or"):
        self.shape = shape
        self.n_in, self.n_out = count("n_in", n_in), count("n_out", n_out)
        self.pairs = validate.pairs("pairs", pairs, self.n_in, self.n_out)
        if mux not in MUXES:
            raise ValueError(f"mux must be one of {', '.join(MUXES)}, not {mux!r}")
        self.mux = mux
        super().__init__({
            "inputs": In(data.ArrayLayout(shape, self.n_in)),
            "select": In(data.ArrayLayout(self.n_in, self.n_out)),
            "outputs": Out(data.ArrayLayout(shape, self.n_out)),
        })

    def elaborate(self, platform):
        m = Module()
        width = len(Value.cast(self.inputs[0]))
        for o in range(self.n_out):
            ins = [i for i in range(self.n_in) if (i, o) in self.pairs]
            if self.mux == "binary" and len(ins) == 4:
                select = self.select[o]
                s0, s1 = Signal(name=f"o{o}_s0"), Signal(name=f"o{o}_s1")
                m.d.comb += [s0.eq(select[ins[1]] | select[ins[3]]),
                             s1.eq(select[ins[2]] | select[ins[3]])]
                a, b, c, d = (Value.cast(self.inputs[i]) for i in ins)
                m.d.comb += self.outputs[o].eq(Mux(s1, Mux(s0, d, c), Mux(s0, b, a)))
                continue
            terms = []
            for i in ins:
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
