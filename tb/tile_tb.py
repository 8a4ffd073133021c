"""cocotb testbench for :class:`rtl.tile.Tile`: one PE driven through its router's mesh ports.

A :class:`TileTB` owns the clock, a :class:`~tb.streams.StreamSource` and a
:class:`~tb.streams.StreamSink` on each mesh port, and the golden model of the core
(:class:`fabric.pe_model.CoreModel`), whose state follows the tile's through a test. A *phase*
sends commands in from W (psums from N and S), runs the same wavelets through the model, and
waits until every port has received what the model says it sends; a watchdog names the ports
still owed words if the tile stops moving.
"""

from wse.fabric import pe_model
from wse.rtl.core_params import COUNTER_BASE, COUNTERS
from wse.rtl.wavelet import WAVELET, Direction

from .clocked import ClockedTB
from .router_tb import load_params
from .streams import StreamSink, StreamSource, always, stuck_offers

__all__ = ["TileStuck", "TileTB", "load_params"]

PORTS = (Direction.N, Direction.E, Direction.S, Direction.W)
#: Depends on timing (waits). ``wavelets_in`` is compared: phases end with every input taken.
TIMED = {"stall_cycles"}


class TileStuck(AssertionError):
    """The watchdog fired: nothing moved while words were still owed."""


class TileTB(ClockedTB):
    """Test harness around one tile DUT; ``params`` is the core's (:func:`sim.tile_run`)."""

    def __init__(self, dut, core, *, idle=None, backpressure=None, watchdog=3000):
        super().__init__(dut)
        self.core = core
        self.model = pe_model.CoreModel(core)
        self.watchdog = watchdog
        self.received = {d: [] for d in PORTS}
        self.accepted = {d: [] for d in PORTS}           # cycles at which inputs took words
        self._moved = 0
        self.sources = {d: StreamSource(dut, f"i_{d.name.lower()}",
                                        idle=idle(d) if idle else always(),
                                        on_sent=self._sent(d)) for d in PORTS}
        self.sinks = {d: StreamSink(dut, f"o_{d.name.lower()}",
                                    backpressure=backpressure(d) if backpressure else always(),
                                    on_received=self._received(d)) for d in PORTS}
        self.models = [*self.sources.values(), *self.sinks.values()]
        c = core.colors
        self.port_of = {c.out: Direction.E, c.psum_to_s: Direction.S, c.psum_to_n: Direction.N}

    def _sent(self, port):
        def sent(word, cycle):
            self._moved += 1
            self.accepted[port].append(cycle)
        return sent

    def _received(self, port):
        def received(word, cycle, first):
            self._moved += 1
            self.received[port].append(word)
        return received


    async def phase(self, commands, psum_from_n=(), psum_from_s=()):
        """Send ``commands`` on W and psums (32-bit values) on N and S; check every word the
        tile sends against the model. Returns ``{color: [words]}`` as the model sent them."""
        want, got = await self._exchange(commands, psum_from_n, psum_from_s)
        for d in PORTS:
            assert got[d] == want.get(d, []), f"port {d.name}: tile sent {got[d]}, model " \
                                              f"{want.get(d, [])}"
        return want

    async def check_counters(self):
        """READ the counter block through the fabric; compare with the model (all but the
        timing-dependent ``stall_cycles``). Returns the tile's counters."""
        want, got = await self._exchange([pe_model.read(self.core, COUNTER_BASE,
                                                        len(COUNTERS))], (), ())
        model = dict(zip(COUNTERS, want[Direction.E]))
        tile = dict(zip(COUNTERS, got[Direction.E]))
        for name in COUNTERS:
            if name not in TIMED:
                assert tile[name] == model[name], f"counter {name}: tile {tile[name]}, " \
                                                  f"model {model[name]}"
        return tile

    async def _exchange(self, commands, psum_from_n, psum_from_s):
        c = self.core.colors
        sent = self.model.run(commands, psum_from_n=psum_from_n, psum_from_s=psum_from_s)
        want = {self.port_of[color]: words for color, words in sent.items() if words}
        start = {d: len(self.received[d]) for d in PORTS}
        self.sources[Direction.W].send(commands)
        self.sources[Direction.N].send(pe_model.psums(c.psum_from_n, psum_from_n))
        self.sources[Direction.S].send(pe_model.psums(c.psum_from_s, psum_from_s))
        quiet = 0
        while True:
            before = self._moved
            await self.step()
            done = (all(s.idle for s in self.sources.values())
                    and all(len(self.received[d]) - start[d] >= len(want.get(d, ()))
                            for d in PORTS))
            quiet = 0 if self._moved != before else quiet + 1
            if done and quiet >= 8:
                break
            if quiet >= self.watchdog:
                raise TileStuck(self._stuck(start, want))
        got = {d: [int(WAVELET.unpack(w)["data"]) for w in self.received[d][start[d]:]]
               for d in PORTS}
        return want, got

    def _stuck(self, start, owed):
        lines = [f"watchdog: the tile did not move for {self.watchdog} cycles "
                 f"(cycle {self.cycle})"]
        lines += stuck_offers({d.name: source for d, source in self.sources.items()})
        for d, words in owed.items():
            missing = len(words) - (len(self.received[d]) - start[d])
            if missing > 0:
                lines.append(f"output {d.name} still owed {missing} word(s)")
        return "\n  ".join(lines)
