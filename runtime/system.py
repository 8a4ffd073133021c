"""The interface to one mesh, whatever runs it: the :class:`System` the host talks to.

The calls follow the shape of Cerebras's ``SdkRuntime``: :meth:`System.memcpy_h2d` and
:meth:`System.memcpy_d2h` copy a block of words to or from every PE of a rectangle,
:meth:`System.launch` streams wavelets into the intakes (a compute phase), and
:meth:`System.gemm` runs a whole ``Y = W @ X``. Every call ends up as one *exchange*: streams
into the west intakes, whatever comes out of the south outlets, and the cycles it took
(:class:`Exchange`). A backend implements only that, as ``_exchange``; the backends are
:mod:`wse.runtime.golden`, :mod:`wse.runtime.simulator` and :mod:`wse.runtime.board`, and
:func:`wse.runtime.open_system` (:mod:`wse.runtime.backends`) opens one by name.

This module holds the interface and what it returns (:class:`Exchange`, :class:`GemmResult`,
:class:`SimulationError`); it imports no backend.
"""

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np

from wse.fabric import pe_model
from wse.fabric.config import MeshConfig
from wse.fabric.program import GemmProgram
from wse.rtl.core_params import COUNTER_BASE, COUNTERS, Y_BASE
from wse.rtl.isa import MAX_READ, READ_ARG, WORD
from wse.rtl.wavelet import unpack

__all__ = ["System", "SimulationError", "Exchange", "GemmResult", "RESET_CYCLES"]

#: Rising edges with ``rst`` high before a simulated mesh's first exchange. Longer than the
#: routers' walk of their route tables after reset (one color a cycle, at most 32 colors:
#: ``rtl/route_state.py``), so the walk is over before any exchange starts and every backend
#: counts the same cycles for the first exchange as for any other (with 3 edges, the first load
#: of a 2x3 mesh took 139 cycles on Verilator, 138 on Icarus and 134 once the walk was over).
RESET_CYCLES = 40

_SYMBOLS = {"X": 0, "Y": Y_BASE, "counters": COUNTER_BASE}
_MAX_ADDRESS = (1 << READ_ARG.fields["addr"][1]) - 1     # a READ's or an ADDR's address


class SimulationError(RuntimeError):
    """The backend failed: a stuck mesh, a broken stream rule, a simulator that died."""


@dataclass
class Exchange:
    """What one exchange returned: the words of each outlet (packed wavelets) and the cycles
    from its first cycle until the mesh was idle again (``None`` for the golden model)."""
    outlets: dict
    cycles: int | None
    error: bool = False
    overflow: bool = False


@dataclass
class GemmResult:
    """One GEMM: ``y`` (requantised, or int32 totals with ``raw``; bf16: bit patterns, bf16 or
    with ``raw`` binary32), the cycles of the compute phase, of loading ``X`` and of reading
    ``Y`` (``None`` where the backend counts no cycles), and each tile's counters for the
    compute phase (``{name: array (rows, cols)}``; empty when none were read)."""
    y: np.ndarray
    cycles: int | None
    load_cycles: int | None
    read_cycles: int | None
    counters: dict = field(default_factory=dict)
    error: bool = False
    overflow: bool = False
    program: object = None


class System(ABC):
    """A mesh of ``config`` (:class:`~fabric.config.MeshConfig`) behind the host interface."""

    backend = None

    def __init__(self, config=None):
        config = MeshConfig() if config is None else config
        if not isinstance(config, MeshConfig):
            raise TypeError(f"config must be a MeshConfig, not {config!r}")
        self.config = config
        self.plan = config.plan
        self.total_cycles = 0

    # The backend's one primitive ------------------------------------------------------------

    @abstractmethod
    def _exchange(self, streams):
        """``streams``: ``{row: [packed wavelets]}`` -> :class:`Exchange`."""

    def exchange(self, streams):
        """Send ``{row: [packed wavelets]}`` into the west intakes; return :class:`Exchange`."""
        streams = {int(r): [int(w) for w in words] for r, words in streams.items()}
        for r in streams:
            if not 0 <= r < self.config.rows:
                raise ValueError(f"intake row {r} is outside the {self.config.rows}-row mesh")
        result = self._exchange(streams)
        self.total_cycles += result.cycles or 0
        return result

    def close(self):  # noqa: B027 (a hook: the golden model holds nothing to release)
        """Release the backend (a simulator process, a serial port)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # SdkRuntime-shaped calls ----------------------------------------------------------------

    def _rect(self, px, py, w, h):
        R, C = self.config.rows, self.config.cols
        for name, value in (("px", px), ("py", py), ("w", w), ("h", h)):
            if not isinstance(value, (int, np.integer)):
                raise TypeError(f"{name} must be an integer, not {value!r}")
        if not (0 <= px and 0 <= py and w >= 1 and h >= 1 and px + w <= C and py + h <= R):
            raise ValueError(f"the rectangle x {px}..{px + w - 1}, y {py}..{py + h - 1} is not "
                             f"inside the {R}x{C} mesh (x is the column, y the row)")
        return [(py + i, px + j) for i in range(h) for j in range(w)]

    @staticmethod
    def _address(symbol):
        if isinstance(symbol, str):
            if symbol not in _SYMBOLS:
                raise ValueError(f"symbol must be one of {', '.join(_SYMBOLS)} or an address, "
                                 f"not {symbol!r}")
            return _SYMBOLS[symbol]
        address = int(symbol)
        if not 0 <= address <= _MAX_ADDRESS:
            raise ValueError(f"address must be in 0..{_MAX_ADDRESS:#x}, not {symbol!r}")
        return address

    def memcpy_h2d(self, dest, src, px, py, w, h, elem_per_pe=None):
        """Copy ``src`` (``(h, w, elem_per_pe)``, or anything of that size in that order) to
        ``elem_per_pe`` words from ``dest`` (``"X"`` or an address) in every PE of the
        rectangle at column ``px``, row ``py``, ``w`` wide and ``h`` high. Returns cycles."""
        tiles = self._rect(px, py, w, h)
        src = np.asarray(src)
        if elem_per_pe is None:
            elem_per_pe = src.size // len(tiles) if len(tiles) else 0
        if src.size != len(tiles) * elem_per_pe:
            raise ValueError(f"src has {src.size} values; {h}x{w} PEs x {elem_per_pe} words "
                             f"need {len(tiles) * elem_per_pe}")
        address = self._address(dest)
        fmt = self.config.fmt
        if fmt.is_float:
            if src.size and (src.min() < 0 or src.max() > 0xFFFF):
                raise ValueError(f"values must be bf16 bit patterns (0..0xFFFF), found "
                                 f"{src.min()}..{src.max()}")
        elif src.size and (src.min() < fmt.operand_min or src.max() > fmt.operand_max):
            raise ValueError(f"values must be in the operand range {fmt.operand_min}.."
                             f"{fmt.operand_max}, found {src.min()}..{src.max()}")
        blocks = src.reshape(len(tiles), elem_per_pe)
        streams = {}
        for (r, c), block in zip(tiles, blocks):
            core = self.config.core(r, c)
            streams.setdefault(r, []).extend([pe_model.select(core), pe_model.addr(core, address),
                                              *pe_model.load(core, block)])
        return self.exchange(streams).cycles

    def memcpy_d2h(self, src, px, py, w, h, elem_per_pe):
        """Read ``elem_per_pe`` words from ``src`` (``"X"``, ``"Y"``, ``"counters"`` or an
        address) of every PE of the rectangle; returns ``(h, w, elem_per_pe)`` int64 (memory
        words sign-extended, bf16 ones as bit patterns, counters as they are)."""
        tiles = self._rect(px, py, w, h)
        address = self._address(src)
        words, cycles = {}, []
        for group in self.plan.read_groups():     # rows sharing a reply color: apart
            streams = {}
            for r, c in tiles:
                if r in group:
                    core = self.config.core(r, c)
                    streams.setdefault(r, []).append(pe_model.select(core))
                    for start in range(0, elem_per_pe, MAX_READ):
                        streams[r].append(pe_model.read(core, address + start,
                                                        min(MAX_READ, elem_per_pe - start)))
            if streams:
                result = self.exchange(streams)
                cycles.append(result.cycles)
                words.update(self.replies(result.outlets, streams))
        self._last_read_cycles = None if None in cycles else sum(cycles)
        out = np.zeros((h, w, elem_per_pe), dtype=np.int64)
        for i, j in np.ndindex(h, w):
            got = words.get((py + i, px + j), [])
            if len(got) != elem_per_pe:
                raise SimulationError(f"PE ({py + i},{px + j}) returned {len(got)} words for a "
                                      f"read of {elem_per_pe}")
            out[i, j] = got
        if src == "counters" or (not isinstance(src, str) and address >= COUNTER_BASE):
            return out
        if self.config.fmt.is_float:
            return out & 0xFFFF_FFFF                    # bit patterns, zero-extended
        return WORD.unpack(out.astype(np.uint64))["value"]

    def replies(self, outlets, rows=None):
        """Outlet words -> ``{(row, col): [32-bit data words]}``, by reply color, for ``rows``
        (every row by default), which must have distinct reply colors (rows that share one
        never reply in the same exchange: ``ColorPlan.read_groups``)."""
        rows = range(self.config.rows) if rows is None else rows
        row_of = {self.plan.out(r): r for r in rows}
        replies = {}
        for c, words in outlets.items():
            if not len(words):
                continue
            data, color, _ = unpack(np.array(words, dtype=np.uint64))
            for d, k in zip(data.tolist(), color.tolist()):
                if k not in row_of:
                    raise SimulationError(f"outlet {c} sent color {k}, which is no reply color")
                replies.setdefault((row_of[k], c), []).append(d)
        return replies

    def counters(self):
        """Every PE's counters: ``{name: array (rows, cols)}`` (one READ each)."""
        R, C = self.config.rows, self.config.cols
        block = self.memcpy_d2h("counters", 0, 0, C, R, len(COUNTERS))
        return {name: block[:, :, k] for k, name in enumerate(COUNTERS)}

    def check_program(self, program):
        """``ValueError`` unless ``program`` is a GEMM program for this mesh's configuration,
        compiled with its ``X`` (what :meth:`gemm` runs)."""
        if not isinstance(program, GemmProgram):
            raise ValueError(f"program must be a GemmProgram (compile_gemm), not {program!r}")
        if program.config != self.config:
            raise ValueError(f"the program is compiled for a {program.config}, not for this "
                             f"{self.config}")
        if program.X is None:
            raise ValueError("the program must be compiled with its X (compile_gemm(config, "
                             "W, X))")

    def launch(self, streams):
        """Stream ``{row: [packed wavelets]}`` (a program's compute phase); returns the
        :class:`Exchange` (raw results come back in its outlets)."""
        return self.exchange(streams)

    def gemm(self, program, *, counters=True):
        """Run a compiled ``Y = W @ X`` (a :class:`~wse.fabric.program.GemmProgram` of this
        mesh's configuration, compiled with its ``X``: :func:`~wse.fabric.compiler.compile_gemm`)
        on this mesh (``docs/mesh.md``): load ``X`` (set its tokens alone where the cores hold it:
        ``load=False``),
        stream the weights, read ``Y`` (or collect what leaves during the compute phase: the
        raw totals of a ``raw`` program, the activations of an ``act`` one). Returns a
        :class:`GemmResult`.

        With ``counters`` the compute phase's counters are read before and after it (two more
        READ exchanges); without, ``counters`` of the result is empty and ``error`` and
        ``overflow`` are the mesh's sticky flags (what training, which calls this often,
        needs). ``ValueError`` for a program of another configuration or without its ``X``."""
        self.check_program(program)
        load = self.exchange(program.load_streams())       # a resident program's: its tokens
        before = self.counters() if counters else None
        compute = self.launch(program.streams)
        error, overflow = compute.error, compute.overflow
        figures = {}
        if counters:
            after = self.counters()
            # ``after`` also counts the READ that took ``before`` (a READ's counters are its
            # start)
            read = {"busy_cycles": 1 + 2 * len(COUNTERS), "wavelets_in": 1,
                    "wavelets_out": len(COUNTERS)}
            figures = {name: after[name] - before[name] - read.get(name, 0) for name in COUNTERS
                       if name not in ("errors", "overflow")}
            figures.update({name: after[name] for name in ("errors", "overflow")})
            error |= bool(figures["errors"].any())
            overflow |= bool(figures["overflow"].any())
        if program.streamed:
            y, read_cycles = program.decode_raw(compute.outlets), 0
        else:
            reads = [self.exchange(streams) for streams in program.read_streams()]
            y = program.decode_y(program.read_blocks([read.outlets for read in reads]))
            read_cycles = None if any(read.cycles is None for read in reads) else sum(
                read.cycles for read in reads)
        return GemmResult(y=y, cycles=compute.cycles, load_cycles=load.cycles,
                          read_cycles=read_cycles, counters=figures, error=error,
                          overflow=overflow, program=program)
