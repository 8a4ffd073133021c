"""MemoryX's two tiers: a byte-bounded in-memory tier over an on-disk tier of ``numpy.memmap``.

A *group* (one layer: its weights, bias, mask and optimizer state) is the unit that moves. The
in-memory tier keeps the most recently used groups within ``memory_bytes``; when a group comes
in and the tier would overflow, the least recently used groups spill to disk (one ``.npy``
file per array, flushed). A group too big for the in-memory tier on its own is never loaded:
:meth:`TieredStore.get` hands out its arrays as writable memmaps, so it streams from disk.
"""

import shutil
import tempfile
from collections import OrderedDict
from pathlib import Path

import numpy as np

from wse.rtl.validate import count

__all__ = ["TieredStore"]


class TieredStore:
    """Groups of named arrays in two tiers.

    Parameters
    ----------
    memory_bytes : int or None
        The in-memory tier's bound in bytes (``None``: unbounded, nothing spills).
    directory : path or None
        The on-disk tier; a temporary directory (removed by :meth:`close`) when ``None``.
    """

    def __init__(self, memory_bytes=None, directory=None):
        self.memory_bytes = (None if memory_bytes is None
                             else count("memory_bytes", memory_bytes, minimum=0))
        self._own_dir = directory is None
        self._dir = None if directory is None else Path(directory)
        self._ram = OrderedDict()      # name -> {array name: ndarray}
        self._disk = {}                # name -> {array name: (shape, dtype)}
        self.spills = self.loads = 0

    # -- where things are ---------------------------------------------------------------------

    @property
    def directory(self):
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="memoryx-"))
        self._dir.mkdir(parents=True, exist_ok=True)
        return self._dir

    def __contains__(self, name):
        return name in self._ram or name in self._disk

    def names(self):
        return list(self._ram) + [n for n in self._disk if n not in self._ram]

    def tier_of(self, name):
        """``"memory"`` or ``"disk"``."""
        if name in self._ram:
            return "memory"
        if name in self._disk:
            return "disk"
        raise KeyError(f"no group {name!r} in the store")

    @staticmethod
    def _nbytes(arrays):
        return sum(a.nbytes for a in arrays.values())

    def bytes_in_memory(self):
        return sum(self._nbytes(g) for g in self._ram.values())

    def bytes_on_disk(self):
        return sum(int(np.prod(shape)) * np.dtype(dtype).itemsize
                   for name, g in self._disk.items() if name not in self._ram
                   for shape, dtype in g.values())

    def stats(self):
        return {"memory_bytes": self.bytes_in_memory(), "disk_bytes": self.bytes_on_disk(),
                "memory_limit": self.memory_bytes, "spills": self.spills, "loads": self.loads,
                "groups_in_memory": len(self._ram),
                "groups_on_disk": sum(1 for n in self._disk if n not in self._ram)}

    # -- moving groups ------------------------------------------------------------------------

    def _path(self, name, key):
        return self.directory / name / f"{key}.npy"

    def _fits(self, nbytes):
        return self.memory_bytes is None or nbytes <= self.memory_bytes

    def _make_room(self, nbytes, keep=None):
        if self.memory_bytes is None:
            return
        while self._ram and self.bytes_in_memory() + nbytes > self.memory_bytes:
            victim = next(iter(self._ram))
            if victim == keep:
                break
            self._spill(victim)

    def _spill(self, name):
        arrays = self._ram.pop(name)
        (self.directory / name).mkdir(parents=True, exist_ok=True)
        layout = {}
        for key, a in arrays.items():
            mm = np.lib.format.open_memmap(self._path(name, key), mode="w+", dtype=a.dtype,
                                           shape=a.shape)
            mm[...] = a
            mm.flush()
            del mm
            layout[key] = (a.shape, a.dtype.str)
        self._disk[name] = layout
        self.spills += 1

    def put(self, name, arrays):
        """Store group ``name`` (``{key: array}``), replacing any group of that name."""
        arrays = {k: np.array(v) for k, v in arrays.items()}
        self.drop(name)
        nbytes = self._nbytes(arrays)
        if self._fits(nbytes):
            self._make_room(nbytes)
            self._ram[name] = arrays
        else:
            self._ram[name] = arrays
            self._spill(name)

    def get(self, name):
        """Group ``name`` as ``{key: array}``; changes to the arrays are the store's (in memory,
        or written through to disk for a group larger than the in-memory tier)."""
        if name in self._ram:
            self._ram.move_to_end(name)
            return self._ram[name]
        if name not in self._disk:
            raise KeyError(f"no group {name!r} in the store")
        layout = self._disk[name]
        maps = {k: np.load(self._path(name, k), mmap_mode="r+", allow_pickle=False)
                for k in layout}
        nbytes = self._nbytes(maps)
        if not self._fits(nbytes):
            return maps
        self._make_room(nbytes)
        self._ram[name] = {k: np.array(m) for k, m in maps.items()}
        del maps
        self.loads += 1
        return self._ram[name]

    def drop(self, name):
        self._ram.pop(name, None)
        if self._disk.pop(name, None) is not None:
            shutil.rmtree(self.directory / name, ignore_errors=True)

    def close(self):
        """Forget everything; remove the on-disk tier if the store made it."""
        self._ram.clear()
        self._disk.clear()
        if self._own_dir and self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __del__(self):
        try:
            self.close()
        except Exception:       # interpreter shutdown
            pass
