"""The edge transfers' cycle model (:func:`fabric.cycle_model.predict_load_cycles`,
:func:`~fabric.cycle_model.predict_read_cycles`) against the RTL: the load and read exchanges
of random GEMMs, cycle for cycle, on meshes of several shapes; and the first exchange after a
reset counting on Icarus what it counts on Verilator and what any later one counts."""

import numpy as np
import pytest

from wse.fabric.config import MeshConfig
from wse.fabric.cycle_model import predict_io_cycles, predict_load_cycles, predict_read_cycles
from wse.runtime import CocotbSystem, CompiledSystem

from .gemm_runs import run_gemm
from .test_mesh_cocotb import MESH_2X3, random_gemm

pytestmark = pytest.mark.xdist_group("compiled")


@pytest.mark.parametrize("config", [MESH_2X3, MeshConfig(3, 2, n_feat=8, n_tok=2, n_out=8),
                                    MeshConfig(1, 4, n_feat=8, n_tok=4, n_out=8),
                                    MeshConfig(2, 2, n_feat=8, n_tok=8, n_out=8)],
                         ids=["2x3", "3x2", "1x4", "2x2"])
def test_the_io_model_counts_the_rtls_load_and_read_cycles(config, figure):
    rng = np.random.default_rng(21)
    loads = reads = 0
    with CompiledSystem(config) as system:
        for _ in range(6):
            n_out = int(rng.integers(1, config.rows * config.n_out + 1))
            n_in = int(rng.integers(1, config.rows * config.n_feat + 1))
            tokens = int(rng.integers(1, config.max_tokens + 1))
            W, X = random_gemm(rng, n_out, n_in, tokens, rng.uniform(0, 0.95),
                               act_sparsity=rng.uniform(0, 0.7))
            raw = bool(rng.integers(2))
            got = run_gemm(system, W, X, raw=raw, counters=False)
            shape = f"{n_out}x{n_in}x{tokens}{' raw' if raw else ''}"
            assert predict_load_cycles(got.program, X) == got.load_cycles, shape
            assert predict_read_cycles(got.program) == got.read_cycles, shape
            assert predict_io_cycles(got.program, X) == got.load_cycles + got.read_cycles
            loads += got.load_cycles
            reads += got.read_cycles
    figure(f"io model vs RTL, mesh {config.rows}x{config.cols}: 6 GEMMs, load {loads} and "
           f"read {reads} cycles, every exchange exact")


def test_the_first_exchange_counts_the_same_on_every_simulator():
    """The routers walk their route tables after reset; the backends start after the walk, so
    the first load counts what a later one does, on Verilator and on Icarus alike."""
    rng = np.random.default_rng(3)
    W, X = random_gemm(rng, 12, 10, 6, 0.5, act_sparsity=0.3)
    counted = []
    for system in (CompiledSystem(MESH_2X3), CocotbSystem(MESH_2X3, sim="icarus")):
        with system:
            first, again = (run_gemm(system, W, X, counters=False) for _ in range(2))
            counted.append((first.load_cycles, again.load_cycles, first.cycles, again.cycles))
    assert counted[0] == counted[1], counted
    assert counted[0][0] == counted[0][1] == predict_load_cycles(first.program, X)
