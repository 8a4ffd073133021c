"""cocotb testbench for the mesh (:class:`fabric.mesh.AxiStreamMesh`): wavelets into the
intakes, wavelets out of the outlets, until the mesh is idle.

A :class:`MeshTB` owns the clock, a :class:`~tb.streams.StreamSource` on every input edge port
and a :class:`~tb.streams.StreamSink` on every output edge port (each checks the stream rule and
X bits every cycle). :meth:`MeshTB.exchange` is the one operation the System backends need:
send whole streams, collect everything that leaves, and count the cycles until the mesh's
``idle`` output says nothing is left in flight. A watchdog names the ports still offering if
nothing moves for too long while the mesh is busy.
"""

from wse.fabric.config import MeshConfig

from .clocked import ClockedTB
from .streams import StreamSink, StreamSource, always, stuck_offers

__all__ = ["MeshStuck", "MeshTB", "config_from_params"]


class MeshStuck(AssertionError):
    """The watchdog fired: the mesh was busy and nothing moved on any port."""


def config_from_params(params):
    """The :class:`~fabric.config.MeshConfig` a testbench's ``WSE_PARAMS`` describe."""
    return MeshConfig.from_dict(params["config"])


class MeshTB(ClockedTB):
    """Test harness around an :class:`~fabric.mesh.AxiStreamMesh` DUT built from ``config``.

    ``idle`` / ``backpressure`` map a port name to a pace (see :mod:`tb.streams`); full rate by
    default.
    """

    def __init__(self, dut, config, *, idle=None, backpressure=None, watchdog=5000):
        super().__init__(dut)
        from wse.fabric.mesh import edge_ports
        self.config = config
        self.watchdog = watchdog
        self.received = {}
        self._moved = 0
        self.sources, self.sinks = {}, {}
        for name, way, _, _ in edge_ports(config):
            if way == "in":
                self.sources[name] = StreamSource(
                    dut, name, idle=idle(name) if idle else always(), on_sent=self._count)
            else:
                self.received[name] = []
                self.sinks[name] = StreamSink(
                    dut, name, backpressure=backpressure(name) if backpressure else always(),
                    on_received=self._receiver(name))
        self.models = [*self.sources.values(), *self.sinks.values()]

    def _count(self, word, cycle):
        self._moved += 1

    def _receiver(self, name):
        def received(word, cycle, first):
            self._moved += 1
            self.received[name].append(word)
        return received

    async def exchange(self, streams):
        """Send ``streams`` (``{port name: [packed wavelets]}``) and run until every word is
        taken and the mesh is idle. Returns ``({port name: [words received]}, cycles)``:
        ``cycles`` from the first cycle of the exchange to the first idle one."""
        start_cycle = self.cycle
        start = {name: len(words) for name, words in self.received.items()}
        for name, words in streams.items():
            if name not in self.sources:
                raise ValueError(f"no input port {name!r}; the mesh has "
                                 f"{', '.join(self.sources)}")
            self.sources[name].send(words)
        quiet, done_at = 0, None
        while True:
            before = self._moved
            await self.step()
            drained = all(source.idle for source in self.sources.values())
            idle = bool(self.dut.idle.value)
            if drained and idle:
                if done_at is None:
                    done_at = self.cycle
                if self.cycle - done_at >= 2:
                    break
            else:
                done_at = None
            quiet = 0 if self._moved != before else quiet + 1
            if quiet >= self.watchdog:
                raise MeshStuck(self._stuck())
        got = {name: words[start[name]:] for name, words in self.received.items()}
        return got, done_at - start_cycle

    def flags(self):
        """The mesh's sticky ``error`` and ``overflow`` outputs."""
        return {"error": int(self.dut.error.value), "overflow": int(self.dut.overflow.value)}

    def _stuck(self):
        lines = [f"watchdog: the mesh was busy and no port moved for {self.watchdog} cycles "
                 f"(cycle {self.cycle})"]
        lines += stuck_offers(self.sources)
        return "\n  ".join(lines)
