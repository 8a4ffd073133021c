"""The router's crossbar: each output copies the payload of the input its one-hot select names."""

from amaranth.hdl import Instance, Module, Mux, Signal, Value
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from . import validate
from .validate import count

__all__ = ["Crossbar", "MUXES"]

#: How each output's multiplexer is built (``Crossbar(mux=...)``).
MUXES = ("and_or", "pfumx")


class Crossbar(wiring.Component):
    """``n_in`` x ``n_out`` one-hot crossbar of ``shape`` payloads (an AND-OR mux per output).

    ``pairs`` lists the ``(input, output)`` connections that exist (all by default); an output
    with four inputs instead of five is about half the logic on an ECP5 (a 4:1 mux fits a
    slice, a 5:1 needs two). A select bit of a missing pair is ignored.

    ``mux`` says how an output's multiplexer is built:

    - ``"and_or"`` (any device): each input ANDed with its select bit, the terms ORed; a zero
      select gives zero. Yosys maps a 4-input output bit to three LUT4s on the ECP5 with
      ``-nowidelut`` (the ULX3S's option), and, with wide LUTs, to more (``docs/fpga.md``).
    - ``"pfumx"`` (the ECP5 only): an output with exactly four inputs ``a, b, c, d`` (an output
      of a router without U-turns) becomes two 2:1 multiplexers, ``s0 ? b : a`` and
      ``s0 ? d : c``, which fit one LUT4 each, and the slice's own multiplexer, the ``PFUMX``
      primitive, choosing between them by ``s1`` (``s0``, ``s1``: the select's one-hot bits
      encoded). Two LUT4s a bit instead of three. A zero select then gives ``a``, not zero (a
      register behind the crossbar loads a payload whose ``valid`` is low). Outputs with
      another number of inputs stay AND-OR. The Verilog then needs the ECP5's cell library:
      Yosys's ``synth_ecp5``, or its ``ecp5/cells_sim.v`` for a simulation
      (``tests/test_router_parts.py`` runs it on Icarus so).

    Members
    -------
    inputs : In(ArrayLayout(shape, n_in))
    select : In(ArrayLayout(n_in, n_out))
        ``select[o]``: one-hot input of output ``o``; zero gives zero.
    outputs : Out(ArrayLayout(shape, n_out))
    """

    def __init__(self, shape, n_in=5, n_out=5, *, pairs=None, mux="and_or"):
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
            if self.mux == "pfumx" and len(ins) == 4:
                self._pfumx(m, o, ins, width)
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

    def _pfumx(self, m, o, ins, width):
        """Output ``o`` of four inputs: two 2:1 multiplexers (a LUT4 each) into a ``PFUMX``."""
        select = self.select[o]
        s0, s1 = Signal(name=f"o{o}_s0"), Signal(name=f"o{o}_s1")
        m.d.comb += [s0.eq(select[ins[1]] | select[ins[3]]),
                     s1.eq(select[ins[2]] | select[ins[3]])]
        a, b, c, d = (Value.cast(self.inputs[i]) for i in ins)
        low, high = Signal(width, name=f"o{o}_ab"), Signal(width, name=f"o{o}_cd")
        out = Signal(width, name=f"o{o}_mux")
        m.d.comb += [low.eq(Mux(s0, b, a)), high.eq(Mux(s0, d, c))]
        for k in range(width):      # PFUMX: Z = C0 ? ALUT : BLUT
            m.submodules[f"o{o}_pfumx{k}"] = Instance(
                "PFUMX", i_ALUT=high[k], i_BLUT=low[k], i_C0=s1, o_Z=out[k])
        m.d.comb += self.outputs[o].eq(out)
