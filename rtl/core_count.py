"""The core's counters (``docs/pe.md``, "Counters"): 32-bit values in LUT RAM, one or two adders."""

from amaranth.hdl import Array, Cat, Module, Mux, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .core_params import COUNTERS, CoreParams
from .validate import integer

__all__ = ["BANKED", "LESS_BITS", "CounterReadSignature", "CounterBank", "counter_inc_layout"]

#: The counters the bank holds, at their ``COUNTERS`` index (``overflow``, a flag, is not one).
BANKED = COUNTERS[:8]

#: Width of ``less``: a READ of up to 4095 words takes back at most ``1 + 2 * 4094`` cycles.
LESS_BITS = 13

#: Cycles between two visits of a counter's entry at most: 8 entries, one a cycle, a READ's
#: word cycle (never two in a row) in between at most.
_VISIT = 16


def counter_inc_layout(n_tok):
    """A cycle's increments, by counter: ``macs_skipped_weight`` counts zero-weight AXPYs
    (each adds ``n_tok``), the others are added as they are."""
    tok = range(n_tok + 1)
    return data.StructLayout({
        "busy_cycles": 1, "macs_issued": tok, "macs_skipped_weight": 1,
        "macs_skipped_act": tok, "wavelets_in": range(4), "wavelets_out": 1,
        "stall_cycles": 1, "errors": 1,
    })


class CounterReadSignature(wiring.Signature):
    """A reader of the counters (the READ engine's side).

    Members
    -------
    read : Out(1)
        Read counter ``index`` this cycle (never in two cycles in a row).
    index : Out(range(len(BANKED)))
    less : Out(LESS_BITS)
        Subtracted from the value read; 0 unless ``read``.
    value : In(32)
        Counter ``index`` as it is at the start of this cycle (this cycle's increments not
        counted), minus ``less``, modulo ``2**32``: combinational.
    """

    def __init__(self):
        super().__init__({
            "read":  Out(1),
            "index": Out(range(len(BANKED))),
            "less":  Out(LESS_BITS),
            "value": In(32),
        })


class CounterBank(wiring.Component):
    """The core's eight 32-bit counters (:data:`BANKED`), without an adder or a read
    multiplexer each.

    Each counter is an entry of one 8 x 32-bit LUT RAM plus a few pending bits: a small
    register per counter adds the cycle's increment (``inc``); every cycle one entry (in turn)
    takes its pending count through a 32-bit adder, and its pending register restarts from the
    cycle's increment. A counter's value is its entry plus its pending count: a read (``port``)
    puts that counter through the adder instead (a cycle that reads writes nothing back: its
    visit waits a cycle), so the read costs no multiplexer of 32-bit values, and ``less`` comes
    off on the way (the READ engine's own increments, for the counters it reports as they were
    when it started). With ``adders=2`` the read has a read port and an adder of its own: the
    same values in the same cycles, on a shorter path (the iCE40's choice, ``docs/fpga.md``).
    Entries are visited at least every 16 cycles (:data:`_VISIT`), so a pending register needs
    ``log2(16 * largest increment)`` bits. Reset clears the pending registers and a flag per
    entry ("written since reset"; an entry whose flag is clear reads 0): one reset edge clears
    the counters, the LUT RAM keeps no state across it. The flag is the read's top address
    bit: the LUT RAM has 16 words, the upper 8 never written, so they read 0 (their initial
    value) and the flag costs no 32-bit gate (``docs/fpga.md``). About 1 place a bit
    of the pending registers, 8 LUT-RAM cells for each read port and a 32-bit adder (a second
    of each with ``adders=2``); a counter of its own took a 32-bit adder and its 32 bits of
    the READ multiplexer.

    Latency: ``inc`` is counted in the cycle it is given. Bad input: none (``read`` in two
    cycles in a row would stretch a visit; the READ engine never does it).

    Parameters
    ----------
    params : CoreParams
    adders : int
        1 (the reader and the visits share one read port and adder) or 2 (one each).

    Members
    -------
    inc : In(counter_inc_layout(n_tok))
        This cycle's increments.
    port : In(CounterReadSignature())
        The READ engine's reads.
    """

    def __init__(self, params, *, adders=1):
        if not isinstance(params, CoreParams):
            raise TypeError(f"params must be a CoreParams, not {params!r}")
        self.params = params
        self.adders = integer("adders", adders, 1, 2)
        super().__init__({
            "inc":  In(counter_inc_layout(params.n_tok)),
            "port": In(CounterReadSignature()),
        })

    def elaborate(self, platform):
        m = Module()
        log_tok = self.params.n_tok.bit_length() - 1
        port = self.port
        # twice the entries: the upper half is never written and reads 0 (the LUT RAM's initial
        # value), so an entry not written since reset is read from its twin there, an address
        # bit instead of a 32-bit gate after the read port (a 16-word LUT RAM is the same cells)
        store = m.submodules.store = Memory(shape=32, depth=2 * len(BANKED), init=[])
        visit = Signal(range(len(BANKED)))         # the entry that takes its pending count
        written = Signal(len(BANKED))              # entries written since reset
        pending = []
        largest = {"macs_issued": self.params.n_tok, "macs_skipped_act": self.params.n_tok,
                   "wavelets_in": 3}
        for k, name in enumerate(BANKED):
            inc = getattr(self.inc, name)
            count = Signal((largest.get(name, 1) * _VISIT).bit_length(), name=f"pending_{name}")
            with m.If(~port.read & (visit == k)):
                m.d.sync += count.eq(inc)
            with m.Else():
                m.d.sync += count.eq(count + inc)
            pending.append(count << log_tok if name == "macs_skipped_weight" else count)
        # The pending counts: a few bits each, signed, then 32-bit adders. With one adder the
        # reader's counter and the visited entry share it (the address a multiplexer of
        # ``index`` and ``visit`` by ``read``); with two, each has a read port and an adder of
        # its own, from its own address register, so whether this cycle reads only picks what
        # is written back and is on neither sum's path.
        width = max(max(len(p) for p in pending), LESS_BITS) + 1
        if self.adders == 1:
            reads = [(Mux(port.read, port.index, visit), port.less)]
        else:
            reads = [(port.index, port.less), (visit, 0)]
        sums = []
        for at, less in reads:
            rp = store.read_port(domain="comb")
            delta = Signal(signed(width))
            total = Signal(32)
            m.d.comb += [
                rp.addr.eq(Cat(at, ~written.bit_select(at, 1))),
                delta.eq(Array(pending)[at] - less),
                total.eq(rp.data + delta),
            ]
            sums.append(total)
        wp = store.write_port()
        m.d.comb += [port.value.eq(sums[0]), wp.addr.eq(visit), wp.data.eq(sums[-1]),
                     wp.en.eq(~port.read)]
        with m.If(~port.read):
            m.d.sync += [visit.eq(visit + 1), written.bit_select(visit, 1).eq(1)]
        return m
