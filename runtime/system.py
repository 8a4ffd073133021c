"""One mesh behind one interface, whatever runs it: the System the host talks to.

The calls follow the shape of Cerebras's ``SdkRuntime``: :meth:`System.memcpy_h2d` and
:meth:`System.memcpy_d2h` copy a block of words to or from every PE of a rectangle,
:meth:`System.launch` streams wavelets into the intakes (a compute phase), and
:meth:`System.gemm` runs a whole ``Y = W @ X``. Every call ends up as one *exchange*: streams
into the west intakes, whatever comes out of the south outlets, and the cycles it took. Backends
implement only that:

- ``golden``: :class:`fabric.mesh_model.MeshModel`, the numpy golden model (no cycles);
- ``verilator`` / ``icarus``: the RTL under cocotb (:mod:`tb.mesh_server`), one simulator
  process per System that keeps its state between calls.

Use :func:`open_system` to get one by name, as a context manager.
"""

import json
import os
import socket
import tempfile
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np

from wse.fabric import pe_model
from wse.fabric.config import MeshConfig
from wse.runtime.wire import recv_message, send_message
from wse.rtl.core_params import COUNTER_BASE, COUNTERS, Y_BASE
from wse.rtl.wavelet import unpack

__all__ = ["BACKENDS", "System", "GoldenSystem", "CocotbSystem", "SimulationError",
           "Exchange", "GemmResult", "open_system"]

BACKENDS = ("golden", "verilator", "icarus", "board")
_SYMBOLS = {"X": 0, "Y": Y_BASE, "counters": COUNTER_BASE}
_MAX_READ = 0xFFF


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
    """One GEMM: ``y`` (requantised, or int32 totals with ``raw``), the cycles of the compute
    phase, of loading ``X`` and of reading ``Y``, and each tile's counters for the compute phase
    (``{name: array (rows, cols)}``)."""
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

    def close(self):
        """Release the backend (a simulator process)."""

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
        if not 0 <= address <= 0xFFFF:
            raise ValueError(f"address must be in 0..0xFFFF, not {symbol!r}")
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
        if src.size and (src.min() < fmt.operand_min or src.max() > fmt.operand_max):
            raise ValueError(f"values must be in the operand range {fmt.operand_min}.."
                             f"{fmt.operand_max}, found {src.min()}..{src.max()}")
        blocks = src.reshape(len(tiles), elem_per_pe)
        streams = {}
        for (r, c), block in zip(tiles, blocks):
            core = self.config.core(r, c)
            streams.setdefault(r, []).extend([pe_model.addr(core, address),
                                              *pe_model.load(core, block)])
        return self.exchange(streams).cycles

    def memcpy_d2h(self, src, px, py, w, h, elem_per_pe):
        """Read ``elem_per_pe`` words from ``src`` (``"X"``, ``"Y"``, ``"counters"`` or an
        address) of every PE of the rectangle; returns ``(h, w, elem_per_pe)`` int64 (memory
        words sign-extended, counters as they are)."""
        tiles = self._rect(px, py, w, h)
        address = self._address(src)
        streams = {}
        for r, c in tiles:
            core = self.config.core(r, c)
            for start in range(0, elem_per_pe, _MAX_READ):
                streams.setdefault(r, []).append(pe_model.read(
                    core, address + start, min(_MAX_READ, elem_per_pe - start)))
        result = self.exchange(streams)
        self._last_read_cycles = result.cycles
        words = self.replies(result.outlets)
        out = np.zeros((h, w, elem_per_pe), dtype=np.int64)
        for i, j in np.ndindex(h, w):
            got = words.get((py + i, px + j), [])
            if len(got) != elem_per_pe:
                raise SimulationError(f"PE ({py + i},{px + j}) returned {len(got)} words for a "
                                      f"read of {elem_per_pe}")
            out[i, j] = got
        if src == "counters" or (not isinstance(src, str) and address >= COUNTER_BASE):
            return out
        return np.where(out >= 1 << 31, out - (1 << 32), out)

    def replies(self, outlets):
        """Outlet words -> ``{(row, col): [32-bit data words]}``, by reply color."""
        row_of = {self.plan.out(r): r for r in range(self.config.rows)}
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

    def launch(self, streams):
        """Stream ``{row: [packed wavelets]}`` (a program's compute phase); returns the
        :class:`Exchange` (raw results come back in its outlets)."""
        return self.exchange(streams)

    def gemm(self, W, X, *, raw=False, balance=True, out_placement=None, zeros=False):
        """``Y = W @ X`` on this mesh (``docs/mesh.md``): load ``X``, stream ``W``'s nonzeros,
        read ``Y`` (or collect the raw totals). Returns a :class:`GemmResult`."""
        from wse.fabric.program import compile_gemm

        X = np.asarray(X)
        program = compile_gemm(self.config, W, X, balance=balance, out_placement=out_placement,
                               raw=raw, zeros=zeros)
        load = self.exchange(program.load_streams(X))
        before = self.counters()
        compute = self.launch(program.streams)
        after = self.counters()
        # ``after`` also counts the READ that took ``before`` (a READ's counters are its start)
        read = {"busy_cycles": 1 + 2 * len(COUNTERS), "wavelets_in": 1,
                "wavelets_out": len(COUNTERS)}
        counters = {name: after[name] - before[name] - read.get(name, 0) for name in COUNTERS
                    if name not in ("errors", "overflow")}
        counters.update({name: after[name] for name in ("errors", "overflow")})
        if raw:
            y, read_cycles = program.decode_raw(compute.outlets), 0
        else:
            read = self.exchange(program.read_streams())
            y, read_cycles = program.decode_y(program.read_blocks(read.outlets)), read.cycles
        return GemmResult(y=y, cycles=compute.cycles, load_cycles=load.cycles,
                          read_cycles=read_cycles, counters=counters,
                          error=bool(counters["errors"].any()) or compute.error,
                          overflow=bool(counters["overflow"].any()) or compute.overflow,
                          program=program)


class GoldenSystem(System):
    """The numpy golden model of the mesh (:class:`fabric.mesh_model.MeshModel`).

    With ``fast``, :meth:`gemm` skips the wavelets and computes the result with
    :func:`fabric.mesh_model.gemm_reference` (bit-identical, thousands of times faster; what
    training uses). It then keeps no memory state and gives no counters; ``overflow`` flags a
    requantisation that saturated or a total at the accumulator's limits.
    """

    backend = "golden"

    def __init__(self, config=None, *, fast=False):
        super().__init__(config)
        from wse.fabric.mesh_model import MeshModel
        self.model = MeshModel(self.config)
        self.fast = bool(fast)

    def gemm(self, W, X, *, raw=False, balance=True, out_placement=None, zeros=False):
        if not self.fast:
            return super().gemm(W, X, raw=raw, balance=balance, out_placement=out_placement,
                                zeros=zeros)
        from wse.fabric import numerics
        from wse.fabric.mesh_model import gemm_reference
        from wse.fabric.program import compile_gemm

        fmt = self.config.fmt
        program = compile_gemm(self.config, W, X, balance=balance, out_placement=out_placement,
                               raw=raw, zeros=zeros)
        Y, totals = gemm_reference(self.config, program, program.X)
        _, saturated = numerics.requantise(fmt, totals)
        overflow = bool(saturated.any() or (totals <= fmt.acc_min).any()
                        or (totals >= fmt.acc_max).any())
        return GemmResult(y=totals if raw else Y, cycles=None, load_cycles=None,
                          read_cycles=None, overflow=overflow, program=program)

    def _exchange(self, streams):
        outlets = self.model.exchange(streams)
        return Exchange(outlets=outlets, cycles=None, error=bool(self.model.error),
                        overflow=bool(self.model.overflow))


class CocotbSystem(System):
    """The RTL of the mesh in a simulator under cocotb (``sim`` ``"verilator"`` or
    ``"icarus"``), one simulator process that keeps its state from call to call.

    ``timeout`` bounds the whole session in wall-clock seconds; ``watchdog`` is the simulated
    cycles without movement after which the testbench declares the mesh stuck.
    """

    def __init__(self, config=None, *, sim="verilator", waves=False, timeout=6 * 3600,
                 watchdog=5000, connect_timeout=1800):
        super().__init__(config)
        from wse.fabric.mesh import AxiStreamMesh

        from wse.sim.cocotb_run import build_once, run

        self.backend = sim
        cfg = self.config
        key = json.dumps(cfg.to_dict(), sort_keys=True)
        top = f"wse_mesh_{cfg.rows}x{cfg.cols}"
        self.built = build_once(lambda: AxiStreamMesh(cfg), key=key, top=top, sim=sim,
                                waves=waves, ports_only=True)
        self._dir = tempfile.mkdtemp(prefix="wse-")
        path = os.path.join(self._dir, "mesh.sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        listener.listen(1)
        listener.settimeout(1.0)
        self.result = None
        params = {"config": cfg.to_dict(), "socket": path, "watchdog": watchdog}
        name = f"serve-{os.getpid()}-{id(self):x}"

        def target():
            self.result = run(self.built, module="wse.tb.mesh_server", params=params, name=name,
                              timeout=timeout)

        self._thread = threading.Thread(target=target, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + connect_timeout
        self._sock = None
        try:
            while self._sock is None:
                try:
                    self._sock, _ = listener.accept()
                except TimeoutError:
                    if not self._thread.is_alive():
                        raise SimulationError(f"the {sim} simulation ended before it connected:"
                                              f" {self._failure()}") from None
                    if time.monotonic() > deadline:
                        raise SimulationError(f"the {sim} simulation did not connect within "
                                              f"{connect_timeout} s") from None
        finally:
            listener.close()
        self._sock.settimeout(None)

    def _failure(self):
        if self.result is None:
            return "no result"
        messages = "; ".join(f"{k}: {v}" for k, v in self.result.failures.items())
        return f"{messages or 'failed'} (log: {self.result.test_dir / 'sim.log'})"

    def _exchange(self, streams):
        if self._sock is None:
            raise SimulationError("this System is closed")
        try:
            send_message(self._sock, {"op": "exchange", "streams": {
                f"s_axis_w{r}": words for r, words in streams.items()}})
            reply = recv_message(self._sock)
        except OSError as e:
            raise SimulationError(f"lost the {self.backend} simulation: {e}") from e
        if reply is None:
            self._thread.join(timeout=60)
            raise SimulationError(f"the {self.backend} simulation ended: {self._failure()}")
        if not reply["ok"]:
            self.close(check=False)
            raise SimulationError(reply["message"])
        outlets = {int(name[len("m_axis_s"):]): words for name, words in reply["received"].items()
                   if name.startswith("m_axis_s")}
        return Exchange(outlets=outlets, cycles=reply["cycles"], error=bool(reply["error"]),
                        overflow=bool(reply["overflow"]))

    def close(self, check=True):
        """End the simulation; with ``check``, a failed testbench raises
        :class:`SimulationError`."""
        if self._sock is not None:
            try:
                send_message(self._sock, {"op": "quit"})
            except OSError:
                pass
            self._sock.close()
            self._sock = None
            self._thread.join()
            if check and (self.result is None or not self.result.passed):
                raise SimulationError(f"the {self.backend} testbench failed: {self._failure()}")


def open_system(backend="golden", config=None, **kwargs):
    """A :class:`System` of ``backend`` (one of :data:`BACKENDS`)."""
    if backend == "golden":
        return GoldenSystem(config, **kwargs)
    if backend in ("verilator", "icarus"):
        return CocotbSystem(config, sim=backend, **kwargs)
    if backend == "board":      # runtime/board.py: a bridge on a serial port (``port=`` required)
        from .board import BoardSystem
        return BoardSystem(config, **kwargs)
    raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
