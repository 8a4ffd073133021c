"""cocotb testbench for :class:`rtl.router.Router`: clock, reset, port models, model, scoreboard.

A :class:`RouterTB` owns the clock, one :class:`~tb.streams.StreamSource` per input, one
:class:`~tb.streams.StreamSink` per output, the :class:`~tb.router_model.RouterModel` and a
:class:`~tb.scoreboard.Scoreboard`. Tests hand it *phases* (``{port: [words]}``): the model
says where every wavelet goes, the sources send, and the phase ends when everything expected
has arrived and the router is quiet. A watchdog bounds every phase: when no wavelet moves for
``watchdog`` cycles it fails naming the stuck inputs (port, color) and the copies still owed.
"""

import json
import os

from wse.rtl.route_table import Position, RouteTable
from wse.rtl.wavelet import CONFIG, WAVELET, Direction

from .clocked import ClockedTB
from .router_model import RouterModel
from .scoreboard import Scoreboard
from .streams import StreamSink, StreamSource, always

__all__ = ["RouterStuck", "RouterTB", "load_params"]


class RouterStuck(AssertionError):
    """The watchdog fired: nothing moved while work was outstanding."""


def load_params():
    """The router parameters the design under test was built with (``WSE_PARAMS``)."""
    return json.loads(os.environ.get("WSE_PARAMS", "{}"))


def _describe(word):
    fields = WAVELET.unpack(word)
    return f"color {int(fields['color'])}{' (ctrl)' if fields['ctrl'] else ''}"


class RouterTB(ClockedTB):
    """Test harness around one router DUT.

    Parameters
    ----------
    dut : cocotb handle of the Verilog top (Amaranth port names).
    params : dict
        The router's parameters (:meth:`rtl.router.Router.params`).
    idle : callable(Direction) -> iterator of bool, optional
        Pace of each input (``True`` = may offer a word this cycle).
    backpressure : callable(Direction) -> iterator of bool, optional
        Pace of each output's ``ready``.
    watchdog : int
        Cycles without any transfer after which a phase fails.
    """

    def __init__(self, dut, params, *, idle=None, backpressure=None, watchdog=2000):
        super().__init__(dut)
        self.params = params
        self.watchdog = watchdog
        self._moved = 0
        self.n_colors = params.get("n_colors", 24)
        self.cfg_color = params.get("cfg_color", 31)
        cfg_route = Position(*params.get("cfg_route", [Direction.mask("NESWR"), 0]))
        self.model = RouterModel(
            n_colors=self.n_colors,
            routes=RouteTable.from_json(self.n_colors, params.get("routes", {})),
            cfg_color=self.cfg_color, cfg_route=cfg_route,
            n_queues=params.get("n_queues", 2), queue_map=params.get("queue_map"),
            depth=params.get("depth", 4))
        self.scoreboard = Scoreboard()
        self.latencies = []            # (input accepted cycle -> output first valid) per copy
        self.arrivals = {d: [] for d in Direction}     # (cycle, word) per output, in order
        self._accepted = {}            # word -> cycle it was accepted
        self.sources = {d: StreamSource(dut, f"i_{d.name.lower()}",
                                        idle=idle(d) if idle else always(),
                                        on_sent=self._sent)
                        for d in Direction}
        self.sinks = {d: StreamSink(dut, f"o_{d.name.lower()}",
                                    backpressure=backpressure(d) if backpressure else always(),
                                    on_received=self._make_receiver(d))
                      for d in Direction}
        self.models = [*self.sources.values(), *self.sinks.values()]

    def _sent(self, word, cycle):
        self._accepted[word] = cycle
        self._moved += 1

    def _make_receiver(self, output):
        def received(word, cycle, first_valid):
            self._moved += 1
            self.arrivals[output].append((cycle, word))
            self.scoreboard.receive(output.name, word)
            if word in self._accepted:
                self.latencies.append(first_valid - self._accepted[word])
        return received

    def pace(self, idle=None, backpressure=None):
        """Change the pacing of every input (``idle``) and output (``backpressure``)."""
        for d in Direction:
            self.sources[d]._idle = idle(d) if idle else always()
            self.sinks[d]._pace = backpressure(d) if backpressure else always()


    # -- phases -------------------------------------------------------------------------------

    async def phase(self, streams, *, settle=8):
        """Send ``{port: [words]}``, expect what the model says, wait until it is all done.

        Returns the model's fates (``{port: [Fate]}``).
        """
        streams = {Direction(port): [int(w) for w in words] for port, words in streams.items()}
        fates = self.model.phase(streams)
        for fate in [f for port in streams for f in fates[port]] + fates["released"]:
            for output, word in fate.outputs:
                self.scoreboard.expect(output.name, (fate.port.name, _color(fate.word)), word)
        for port, words in streams.items():
            self.sources[port].send(words)
        await self.run_until_done(settle=settle)
        return fates

    async def run_until_done(self, *, settle=8):
        """Clock until all sources are empty, nothing is owed, and ``settle`` quiet cycles."""
        quiet = 0
        stalled = 0
        while quiet < settle:
            before = self._moved
            await self.step()
            busy = (not all(s.idle for s in self.sources.values())
                    or self.scoreboard.lost)
            if self._moved != before:
                quiet = stalled = 0
            else:
                quiet = quiet + 1 if not busy else 0
                stalled = stalled + 1 if busy else 0
            if stalled >= self.watchdog:
                raise RouterStuck(self.stuck_report())
        assert self.scoreboard.unexpected == 0 and self.scoreboard.reordered == 0, \
            f"{self.scoreboard.summary()}: {'; '.join(self.scoreboard.errors)}"

    async def idle_cycles(self, count):
        for _ in range(count):
            await self.step()

    def stuck_report(self):
        lines = [f"watchdog: nothing moved for {self.watchdog} cycles (cycle {self.cycle})"]
        for port, source in self.sources.items():
            if source.offered is not None:
                lines.append(f"input {port.name} stuck offering {_describe(source.offered)} "
                             f"({len(source.queue)} more queued)")
            elif source.queue:
                lines.append(f"input {port.name} has {len(source.queue)} words not offered")
        for (output, (port, color)), count in sorted(self.scoreboard.outstanding().items()):
            lines.append(f"output {output} still owed {count} wavelet(s) of color {color} "
                         f"from input {port}")
        return "\n  ".join(lines)

    # -- configuration ------------------------------------------------------------------------

    async def program(self, table, *, port=Direction.R):
        """Load ``table`` through configuration wavelets on ``port`` and wait until applied."""
        fates = await self.phase({port: table.config_wavelets(self.cfg_color)})
        assert not any(f.dropped for f in fates[Direction(port)]), "configuration was dropped"

    def drops(self):
        return self.dut.drops.value.to_unsigned()

    def error(self):
        return int(self.dut.error.value)

    def check_counters(self):
        assert self.drops() == self.model.drops, \
            f"router counted {self.drops()} drops, model expects {self.model.drops}"
        assert self.error() == (1 if self.model.drops else 0), \
            f"error flag {self.error()} with {self.model.drops} drops"


def _color(word):
    return int(WAVELET.unpack(word)["color"])


def data_words(color, uids, *, ctrl=0):
    """Wavelets of ``color`` whose data are the unique ids ``uids`` (so each is traceable)."""
    return [int(WAVELET.pack(data=uid, color=color, ctrl=ctrl)) for uid in uids]


def config_word(cfg_color, payload):
    return int(WAVELET.pack(data=payload, color=cfg_color, ctrl=0))


__all__ += ["data_words", "config_word", "CONFIG"]
