"""Valid/ready stream models for cocotb: a source, a sink, and the inserters that pace them.

The models do not await anything themselves. A testbench's clock loop calls, once a cycle,
``drive()`` on every model (after the rising edge, to set what the DUT sees during the cycle)
and then ``sample()`` (in the read-only phase before the next rising edge, when ``valid`` and
``ready`` are settled, so ``valid & ready`` is exactly the transfer that edge makes). One loop
for all ports keeps a five-port router at tens of thousands of cycles per second under cocotb.

Signals follow Amaranth's Verilog names for a stream member ``<port>``: ``<port>__payload``,
``<port>__valid``, ``<port>__ready``, or AXI4-Stream names (``<port>_tdata`` ...) for the mesh.
"""

import itertools
import random
from collections import deque

from wse.rtl.wavelet import WAVELET

__all__ = ["always", "bursty", "random_pattern", "stream_handles", "StreamSource",
           "StreamProtocolError", "StreamSink", "AxiWaveletPayload", "stuck_offers"]


def always():
    """Pace that is always on: full rate, or never any backpressure."""
    return itertools.repeat(True)


def bursty(pattern=(1, 1, 1, 0)):
    """A repeating on/off pace, such as ``itertools.cycle([1, 1, 1, 0])``."""
    return (bool(x) for x in itertools.cycle(pattern))


def random_pattern(seed, on=0.5):
    """A random pace, on with probability ``on`` each cycle (reproducible from ``seed``)."""
    rng = random.Random(seed)
    while True:
        yield rng.random() < on


def stream_handles(dut, port):
    """The ``(payload, valid, ready)`` handles of stream ``port``: Amaranth's names
    (``<port>__payload``, ...) or, when the DUT has ``<port>_tdata``, an AXI4-Stream port
    whose ``tdata`` / ``tdest`` / ``tuser`` carry a wavelet's data / color / ctrl."""
    if hasattr(dut, f"{port}_tdata"):
        return (AxiWaveletPayload(dut, port), getattr(dut, f"{port}_tvalid"),
                getattr(dut, f"{port}_tready"))
    return tuple(getattr(dut, f"{port}__{name}") for name in ("payload", "valid", "ready"))


class _Word:
    """A packed wavelet read from AXI fields, with the two methods the stream models use."""

    def __init__(self, parts):
        self._parts = parts

    @property
    def is_resolvable(self):
        return all(part.is_resolvable for part in self._parts)

    def to_unsigned(self):
        data, dest, user = (part.to_unsigned() if hasattr(part, "to_unsigned") else int(part)
                            for part in self._parts)   # a 1-bit handle gives a Logic
        return int(WAVELET.pack(data=data, color=dest, ctrl=user))

    def __str__(self):
        return "/".join(str(part) for part in self._parts)


class AxiWaveletPayload:
    """Stands for a packed 38-bit wavelet handle over an AXI4-Stream port's ``tdata`` (data,
    bits 31:0), ``tdest`` (color, 36:32) and ``tuser`` (ctrl, 37) handles."""

    def __init__(self, dut, port):
        self._handles = tuple(getattr(dut, f"{port}_{f}") for f in ("tdata", "tdest", "tuser"))

    @property
    def value(self):
        return _Word([h.value for h in self._handles])

    @value.setter
    def value(self, word):
        fields = WAVELET.unpack(int(word))
        for handle, name in zip(self._handles, ("data", "color", "ctrl")):
            handle.value = int(fields[name])


class StreamSource:
    """Drives words into a DUT stream input, each held until taken.

    ``idle`` is an iterator of booleans: on a cycle where it yields ``False`` and no word is
    already offered, ``valid`` stays low (a word once offered is never withdrawn). ``on_sent``
    is called with ``(word, cycle)`` for each transfer.
    """

    def __init__(self, dut, port, *, idle=None, on_sent=None):
        self.name = port
        self._payload, self._valid, self._ready = stream_handles(dut, port)
        self._idle = idle or always()
        self._on_sent = on_sent
        self.queue = deque()
        self.offered = None
        self.sent = 0
        self.stalled_cycles = 0       # cycles with valid high and ready low
        self._valid.value = 0
        self._payload.value = 0

    def send(self, words):
        self.queue.extend(int(w) for w in words)

    @property
    def idle(self):
        return self.offered is None and not self.queue

    def drive(self, cycle):
        if self.offered is None and self.queue and next(self._idle):
            self.offered = self.queue.popleft()
            self._payload.value = self.offered
        self._valid.value = self.offered is not None

    def sample(self, cycle):
        if self.offered is None:
            return
        if self._ready.value:
            self.sent += 1
            if self._on_sent:
                self._on_sent(self.offered, cycle)
            self.offered = None
        else:
            self.stalled_cycles += 1


class StreamProtocolError(AssertionError):
    """A stream broke the valid/ready rule: an offer not taken must stay, unchanged."""


class StreamSink:
    """Takes words from a DUT stream output with ``ready`` paced by ``backpressure``.

    Checks the stream rule on every cycle: a word offered and not taken must be offered again,
    unchanged, until it is taken (:class:`StreamProtocolError` otherwise).

    ``backpressure`` yields ``True`` on cycles where the sink is ready. ``on_received`` is
    called with ``(word, cycle)`` for each transfer; ``first_valid`` records, for the word being
    offered, the cycle it first appeared (for latency figures).
    """

    def __init__(self, dut, port, *, backpressure=None, on_received=None):
        self.name = port
        self._payload, self._valid, self._ready = stream_handles(dut, port)
        self._pace = backpressure or always()
        self._on_received = on_received
        self.received = 0
        self.offered_since = None
        self._stalled = None          # the word offered and not taken last cycle
        self._ready.value = 0

    def drive(self, cycle):
        self._ready.value = 1 if next(self._pace) else 0

    def _word(self, cycle):
        value = self._payload.value
        if not value.is_resolvable:
            raise StreamProtocolError(f"{self.name}: offered a payload with unknown bits "
                                      f"{value} in cycle {cycle}")
        return value.to_unsigned()

    def sample(self, cycle):
        valid = self._valid.value
        if not valid.is_resolvable:
            raise StreamProtocolError(f"{self.name}: valid is {valid} in cycle {cycle}")
        valid = bool(valid)
        if self._stalled is not None:
            word = self._word(cycle) if valid else None
            if word != self._stalled:
                raise StreamProtocolError(
                    f"{self.name}: offered {self._stalled:#012x} and, not taken, "
                    + ("withdrew it" if word is None else f"changed it to {word:#012x}")
                    + f" in cycle {cycle}")
        if not valid:
            self.offered_since = None
            return
        if self.offered_since is None:
            self.offered_since = cycle
        if self._ready.value:
            word = self._word(cycle)
            self.received += 1
            self._stalled = None
            if self._on_received:
                self._on_received(word, cycle, self.offered_since)
            self.offered_since = None
        else:
            self._stalled = self._word(cycle)


def stuck_offers(sources):
    """Watchdog lines for ``{name: StreamSource}``: each input still offering a word, by color."""
    lines = []
    for name, source in sources.items():
        if source.offered is not None:
            color = int(WAVELET.unpack(source.offered)["color"])
            lines.append(f"input {name} stuck offering color {color} "
                         f"({len(source.queue)} more queued)")
    return lines
