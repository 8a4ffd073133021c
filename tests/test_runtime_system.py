"""The runtime package (:mod:`runtime`): the backend registry and :func:`open_system`, and
:meth:`System.gemm` with and without counters on the golden model (the simulators' run is in
``tests/test_mesh_cocotb.py``)."""

import numpy as np
import pytest

from wse import runtime
from wse.fabric.compiler import compile_gemm
from wse.fabric.config import MeshConfig
from wse.rtl.core_params import COUNTERS
from wse.runtime import BACKENDS, REGISTRY, SIMULATED, SIMULATORS, GoldenSystem, open_system

from .gemm_runs import run_gemm

CONFIG = MeshConfig(2, 3, n_feat=8, n_tok=4, n_out=8)


def test_the_registry_names_every_backend_once():
    assert BACKENDS == tuple(REGISTRY) == ("golden", "verilator", "icarus", "verilator-cocotb",
                                           "board")
    assert SIMULATORS == ("verilator", "icarus")
    assert SIMULATED == ("golden", "verilator", "icarus", "verilator-cocotb")
    assert REGISTRY["golden"] is GoldenSystem and REGISTRY["board"] is runtime.BoardSystem
    assert REGISTRY["verilator"] is runtime.CompiledSystem
    with pytest.raises(TypeError):
        REGISTRY["fake"] = GoldenSystem         # read-only: backends are added in backends.py
    system = open_system("golden", CONFIG, fast=True)
    assert isinstance(system, GoldenSystem) and system.fast and system.config is CONFIG
    for backend in ("questa", None, ["golden"]):
        expected = (rf"^backend must be one of golden, verilator, icarus, verilator-cocotb, "
                    rf"board, not {backend!r}").replace("[", r"\[").replace("]", r"\]")
        with pytest.raises(ValueError, match=expected):
            open_system(backend, CONFIG)
    with pytest.raises(ValueError, match=r"^sim must be one of verilator, icarus, not 'x'$"):
        runtime.CocotbSystem(CONFIG, sim="x")
    with pytest.raises(TypeError, match="multiple values for keyword argument 'sim'"):
        open_system("verilator-cocotb", CONFIG, sim="icarus")
    with pytest.raises(TypeError, match="unexpected keyword argument 'sim'"):
        open_system("verilator", CONFIG, sim="icarus")      # the compiled model is Verilator's


class Counting(GoldenSystem):
    """The golden System, counting its exchanges."""

    def __init__(self, config):
        super().__init__(config)
        self.exchanges = 0

    def _exchange(self, streams):
        self.exchanges += 1
        return super()._exchange(streams)


@pytest.mark.parametrize("raw", [False, True])
def test_gemm_without_counters_skips_their_reads_and_gives_the_same_result(raw):
    rng = np.random.default_rng(4)
    W = rng.integers(-300, 300, (8, 12))
    W[rng.random(W.shape) < 0.5] = 0
    X = rng.integers(-300, 300, (12, 4))
    with_counters, without = Counting(CONFIG), Counting(CONFIG)
    want = run_gemm(with_counters, W, X, raw=raw)
    got = run_gemm(without, W, X, raw=raw, counters=False)
    np.testing.assert_array_equal(got.y, want.y)
    assert set(want.counters) == set(COUNTERS) and got.counters == {}
    assert (got.error, got.overflow) == (want.error, want.overflow) == (False, False)
    assert without.exchanges == with_counters.exchanges - 2     # the two counter READs
    fast = run_gemm(GoldenSystem(CONFIG, fast=True), W, X, raw=raw, counters=False)
    np.testing.assert_array_equal(fast.y, want.y)


def test_gemm_without_counters_still_flags_overflow():
    W = np.full((4, 8), 32767)
    X = np.full((8, 4), 32767)
    assert run_gemm(GoldenSystem(CONFIG), W, X, counters=False).overflow


@pytest.mark.parametrize("fast", [False, True])
def test_gemm_runs_a_program_compiled_for_its_mesh_with_its_x(fast):
    system = GoldenSystem(CONFIG, fast=fast)
    W, X = np.eye(4, 6, dtype=np.int64), np.ones((6, 4), dtype=np.int64)
    other = MeshConfig(2, 2, n_feat=8, n_tok=4, n_out=8)
    with pytest.raises(ValueError, match=r"^the program is compiled for a 2x2 .*, not for this "
                                         r"2x3 "):
        system.gemm(compile_gemm(other, W, X))
    with pytest.raises(ValueError, match=r"^the program must be compiled with its X"):
        system.gemm(compile_gemm(CONFIG, W))
    with pytest.raises(ValueError, match=r"^program must be a GemmProgram \(compile_gemm\), "
                                         r"not array"):
        system.gemm(W)
