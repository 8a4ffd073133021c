"""Scoreboard for multicast fabrics: exactly-once delivery, order per (input, color)."""

from collections import defaultdict, deque

__all__ = ["Scoreboard"]


class Scoreboard:
    """Matches what outputs receive against what a reference model expects.

    Every expected copy is a ``(output, source, word)``, ``source`` being the ordering key
    (here ``(input port, color)``): copies with one source must reach one output in the order
    they were expected. A received word that matches a pending copy out of order counts as
    *reordered*; one that matches nothing pending counts as *unexpected* (a duplicate or a
    wavelet that should not be there). What is still pending at the end is *lost*.
    """

    def __init__(self):
        self._pending = defaultdict(deque)        # (output, source) -> deque of words
        self._where = defaultdict(lambda: defaultdict(int))   # (output, word) -> {source: n}
        self.expected = 0
        self.matched = 0
        self.reordered = 0
        self.unexpected = 0
        self.errors = []

    def expect(self, output, source, word):
        self._pending[output, source].append(word)
        self._where[output, word][source] += 1
        self.expected += 1

    def receive(self, output, word):
        sources = self._where.get((output, word))
        if not sources:
            self.unexpected += 1
            self._note(f"output {output}: unexpected word {word:#012x}")
            return
        for source in sources:
            if self._pending[output, source][0] == word:
                break
        else:
            source = next(iter(sources))
            self.reordered += 1
            self._note(f"output {output}: word {word:#012x} from {source} out of order")
        self._pending[output, source].remove(word)
        sources[source] -= 1
        if not sources[source]:
            del sources[source]
        if not sources:
            del self._where[output, word]
        self.matched += 1

    @property
    def lost(self):
        return sum(len(q) for q in self._pending.values())

    def outstanding(self):
        """``{(output, source): count}`` of copies still expected."""
        return {key: len(q) for key, q in self._pending.items() if q}

    @property
    def clean(self):
        return self.lost == 0 and self.reordered == 0 and self.unexpected == 0

    def summary(self):
        return (f"{self.matched}/{self.expected} copies delivered, {self.lost} lost, "
                f"{self.reordered} reordered, {self.unexpected} unexpected")

    def _note(self, message):
        if len(self.errors) < 20:
            self.errors.append(message)
