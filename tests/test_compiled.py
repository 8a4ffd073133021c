"""The compiled backend (:class:`runtime.compiled.CompiledSystem`) against the cocotb path on the
same RTL: the same results, cycle counts, flags and counters, exchange after exchange, with
either model (the lanes model, the default, and Verilator's); and its errors (a stuck mesh named
by port and color, a dead simulator, a closed System, a failed build). Its waveforms (Verilator
only) are tested through ``wse gemm --waves`` (tests/test_cli_gemm.py)."""

import os
import signal

import numpy as np
import pytest

from wse.fabric import pe_model
from wse.fabric.config import MeshConfig
from wse.rtl.core_params import COUNTERS
from wse.rtl.numfmt import BFloat16
from wse.rtl.wavelet import pack
from wse.runtime import CocotbSystem, CompiledSystem, GoldenSystem, SimulationError
from wse.sim.compiled import harness_top

from .gemm_runs import run_gemm
from .test_bf16 import bf16_operands
from .test_mesh_cocotb import MESH_2X3, random_gemm

#: One worker builds and runs the compiled models (the cocotb path's 2x3 build is on disk,
#: shared with tests/test_mesh_cocotb.py through its lock).
pytestmark = pytest.mark.xdist_group("compiled")


def same_exchange(a, b, what):
    assert a.cycles == b.cycles, f"{what}: {a.cycles} cycles compiled, {b.cycles} under cocotb"
    assert a.outlets == b.outlets, f"{what}: the outlets differ"
    assert (a.error, a.overflow) == (b.error, b.overflow), f"{what}: the flags differ"


class Recording:
    """Wraps a System and keeps every exchange it makes (each of its calls goes through
    :meth:`System.exchange`)."""

    def __init__(self, system):
        self.system = system
        self.log = []
        exchange = system.exchange

        def recorded(streams):
            result = exchange(streams)
            self.log.append((streams, result))
            return result
        system.exchange = recorded


def run_program(system, rng, config, steps):
    """A random program: GEMMs (requantised, raw, zeros streamed, masked), memory copies and
    counter reads, in a random order; every result goes into the returned list."""
    results = []
    for _ in range(steps):
        kind = rng.integers(5)
        n_in = int(rng.integers(1, config.n_feat * config.rows + 1))
        n_out = int(rng.integers(1, config.n_out * config.rows + 1))
        tokens = int(rng.integers(1, config.n_tok * config.cols + 1))
        W, X = random_gemm(rng, n_out, n_in, tokens, rng.uniform(0, 0.95),
                           act_sparsity=rng.uniform(0, 0.7))
        if kind == 0:
            results.append(run_gemm(system, W, X).y)
        elif kind == 1:
            results.append(run_gemm(system, W, X, raw=True, counters=False).y)
        elif kind == 2:
            results.append(run_gemm(system, W, X, zeros=True).y)
        elif kind == 4:
            mask = rng.random((n_out, tokens)) < rng.uniform(0.05, 0.5)
            results.append(run_gemm(system, W, X, raw=bool(rng.integers(2)), mask=mask).y)
        else:
            block = rng.integers(-300, 300, (config.rows, config.cols, 5))
            system.memcpy_h2d("X", block, 0, 0, config.cols, config.rows)
            results.append(system.memcpy_d2h("X", 0, 0, config.cols, config.rows, 5))
            results.append(system.counters()["macs_issued"])
    return results


def check_against(config, seed, steps, reference=None, **options):
    """The same random program on the compiled backend (built with ``options``) and on
    ``reference`` (a System; the cocotb path by default): every exchange equal."""
    compiled = Recording(CompiledSystem(config, **options))
    cocotb = Recording(reference or CocotbSystem(config, sim="verilator"))
    with compiled.system, cocotb.system, GoldenSystem(config) as golden:
        got = run_program(compiled.system, np.random.default_rng(seed), config, steps)
        want = run_program(cocotb.system, np.random.default_rng(seed), config, steps)
        reference = run_program(golden, np.random.default_rng(seed), config, steps)
        assert len(compiled.log) == len(cocotb.log) > steps
        for k, ((streams_a, a), (streams_b, b)) in enumerate(zip(compiled.log, cocotb.log)):
            assert streams_a == streams_b
            same_exchange(a, b, f"exchange {k}")
        for a, b, c in zip(got, want, reference):
            np.testing.assert_array_equal(a, b)
            np.testing.assert_array_equal(a, c)
        counters = compiled.system.counters()
        again = cocotb.system.counters()
        for name in COUNTERS:
            np.testing.assert_array_equal(counters[name], again[name], err_msg=name)
    cycles = sum(result.cycles for _, result in compiled.log)
    return len(compiled.log), cycles


def test_a_random_program_runs_cycle_for_cycle_as_under_cocotb(figure):
    exchanges, cycles = check_against(MESH_2X3, seed=11, steps=4)
    figure(f"compiled (lanes) vs cocotb, mesh 2x3: {exchanges} exchanges, {cycles} cycles, "
           f"every exchange's outlets, cycles and flags equal, counters equal")


def test_the_lanes_model_runs_cycle_for_cycle_as_verilators(figure):
    exchanges, cycles = check_against(MESH_2X3, seed=13, steps=4, engine="lanes",
                                      reference=CompiledSystem(MESH_2X3, engine="verilator"))
    figure(f"compiled, lanes vs Verilator, mesh 2x3: {exchanges} exchanges, {cycles} cycles, "
           f"equal")


@pytest.mark.slow      # about a minute: a second lanes build; one lane group stays in the suite
def test_a_mesh_of_two_lane_groups_runs_cycle_for_cycle_as_verilators(figure):
    """17 tiles: the last a lane of a second group, its neighbours' links across groups."""
    config = MeshConfig(1, 17, n_feat=8, n_tok=2, n_out=8)
    exchanges, cycles = check_against(config, seed=14, steps=3, engine="lanes",
                                      reference=CompiledSystem(config, engine="verilator"))
    figure(f"compiled, lanes vs Verilator, mesh 1x17 (two lane groups): {exchanges} exchanges, "
           f"{cycles} cycles, equal")


@pytest.mark.slow      # 45 s: its own build with edge ports
def test_a_mesh_with_edge_ports_runs_cycle_for_cycle_as_verilators(figure):
    """Ports on the north and east edges too (inputs and outputs), which the lanes model wires
    itself: the same exchanges as Verilator's model of the exported mesh."""
    config = MeshConfig(2, 3, n_feat=8, n_tok=2, n_out=8, edges="NE")
    exchanges, cycles = check_against(config, seed=16, steps=3, engine="lanes",
                                      reference=CompiledSystem(config, engine="verilator"))
    figure(f"compiled, lanes vs Verilator, mesh 2x3 with N and E edge ports: {exchanges} "
           f"exchanges, {cycles} cycles, equal")


@pytest.mark.slow      # 40 s: the bf16 lanes build; bf16 meshes stay in the suite (test_mesh_bf16)
def test_the_lanes_model_runs_bf16_cycle_for_cycle_as_verilators(figure):
    """bf16 operands over the whole exponent range (subnormals, infinities, NaNs, arbitrary
    patterns), raw binary32 totals and requantised results."""
    config = MeshConfig(2, 2, n_feat=8, n_tok=4, n_out=8, fmt=BFloat16())
    rng = np.random.default_rng(15)
    with CompiledSystem(config, engine="lanes") as lanes, \
            CompiledSystem(config, engine="verilator") as rtl, \
            GoldenSystem(config) as golden:
        for k in range(4):
            W = bf16_operands(rng, (12, 14), zeros=0.5, wild=0.3)
            X = bf16_operands(rng, (14, 6), wild=0.3)
            got = [run_gemm(system, W, X, raw=k % 2 == 1) for system in (lanes, rtl, golden)]
            assert got[0].cycles == got[1].cycles
            assert got[0].overflow == got[1].overflow
            np.testing.assert_array_equal(got[0].y, got[1].y)
            np.testing.assert_array_equal(got[0].y, got[2].y)
    figure(f"compiled bf16, lanes vs Verilator, mesh 2x2: 4 GEMMs, {got[0].cycles} cycles the "
           f"last, equal and equal to golden")


@pytest.mark.parametrize("options, message", [
    ({"engine": "vcs"}, r"^engine must be one of lanes, verilator, not 'vcs'$"),
    ({"engine": "lanes", "waves": True}, r"^waves needs engine='verilator' \(the lanes model "
                                         r"has none\)$"),
    ({"engine": "lanes", "threads": 2}, r"^threads needs engine='verilator'"),
])
def test_engine_options_are_checked(options, message):
    with pytest.raises(ValueError, match=message):
        CompiledSystem(MESH_2X3, **options)


@pytest.mark.slow      # about 2 minutes: a second build of the mesh, as a hierarchy
def test_the_hierarchical_build_runs_cycle_for_cycle_as_the_flat_one(figure):
    exchanges, cycles = check_against(MESH_2X3, seed=12, steps=3, hierarchical=True,
                                      reference=CompiledSystem(MESH_2X3, hierarchical=False))
    figure(f"compiled, hierarchical tile vs flat, mesh 2x3: {exchanges} exchanges, {cycles} "
           f"cycles, equal")


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4))
def test_random_meshes_and_programs_match_cocotb(seed, figure):
    rng = np.random.default_rng(100 + seed)
    rows, cols = (int(x) for x in rng.integers(1, 4, 2))
    config = MeshConfig(rows, cols, n_feat=int(rng.choice([8, 16])),
                        n_tok=int(rng.choice([2, 4, 8])), n_out=int(rng.choice([8, 16])),
                        lanes=int(rng.choice([1, 2])))
    exchanges, cycles = check_against(config, seed=seed, steps=10)
    figure(f"compiled vs cocotb, {config}: {exchanges} exchanges, {cycles} cycles, equal")


def test_a_stuck_mesh_is_named_by_port_and_color_and_the_system_ends():
    with CompiledSystem(MESH_2X3, watchdog=300) as rtl:
        bad = int(pack(123, MESH_2X3.plan.out(0), 0))      # a reply color entering an intake
        assert rtl.exchange({0: [bad]}).error
        # CRs into row 0 only: row 0 waits for row 1's psums, which never come, and once its
        # buffers and queues are full the intake holds the next one
        stuck = [pe_model.cr(MESH_2X3.core(0, 0), 1)] * 100
        with pytest.raises(SimulationError, match=r"(?s)^watchdog: the mesh was busy and no "
                                                  r"port moved for 300 cycles .*input s_axis_w0 "
                                                  r"stuck offering color \d+"):
            rtl.exchange({0: stuck})
        with pytest.raises(SimulationError, match="this System is closed"):
            rtl.exchange({0: []})


@pytest.mark.parametrize("engine", ["lanes", "verilator"])
def test_a_simulator_that_dies_is_a_one_line_error(engine):
    rtl = CompiledSystem(MESH_2X3, engine=engine)
    os.kill(rtl.pid, signal.SIGKILL)
    with pytest.raises(SimulationError, match=rf"^the compiled {engine} simulation ended: exit "
                                              r"status -9$"):
        rtl.exchange({0: []})
    rtl.close()     # nothing left to do


@pytest.mark.parametrize("engine, flags, what", [
    ("verilator", "VERILATOR_ARGS", "the compiled wse_mesh_1x1"),
    ("lanes", "CXXFLAGS", "the lanes model of lanes_1x1"),
])
def test_a_failed_build_is_a_simulation_error_naming_its_log(monkeypatch, tmp_path, engine, flags,
                                                             what):
    from wse.sim import cocotb_run, compiled, lanes

    module = compiled if engine == "verilator" else lanes
    monkeypatch.setattr(module, flags, [*getattr(module, flags), "--no-such"])
    monkeypatch.setattr(compiled, "BUILD_ROOT", tmp_path)
    monkeypatch.setattr(cocotb_run, "BUILD_ROOT", tmp_path)
    with pytest.raises(SimulationError, match=rf"^building {what} failed \(log: .*build\.log\):"):
        CompiledSystem(MeshConfig(1, 1, n_feat=4, n_tok=2, n_out=4), engine=engine)


def test_the_wrapper_ties_outlets_ready_and_registers_the_reset():
    verilog, header, inputs, outputs = harness_top(MESH_2X3, "wse_mesh_2x3")
    assert inputs == ("s_axis_w0", "s_axis_w1") and outputs == tuple(
        f"m_axis_s{c}" for c in range(3))
    assert "always @(posedge clk) rst <= rst_in;" in verilog
    assert all(f".m_axis_s{c}_tready(1'b1)" in verilog for c in range(3))
    assert "in[1].tready = &top->s_axis_w1_tready;" in header
    assert "tready" not in "".join(line for line in header.splitlines() if "out[" in line)


def test_the_lanes_model_names_a_cell_it_does_not_know():
    from wse.sim.lanes_netlist import Tile

    module = {"netnames": {}, "ports": {"a": {"direction": "input", "bits": [2, 3]},
                                        "y": {"direction": "output", "bits": [4, 5]}},
              "cells": {"d": {"type": "$div", "parameters": {},
                              "connections": {"A": [2, 3], "B": [2, 3], "Y": [4, 5]}}}}
    with pytest.raises(ValueError, match=r"^the lanes model has no \$div cell$"):
        Tile(module)


def test_a_tile_the_lanes_model_cannot_run_is_a_simulation_error(monkeypatch, tmp_path):
    from wse.sim import cocotb_run, lanes

    def refuse(config, module):
        raise ValueError("the lanes model has no $div cell")

    monkeypatch.setattr(lanes, "generate", refuse)
    monkeypatch.setattr(cocotb_run, "BUILD_ROOT", tmp_path)
    with pytest.raises(SimulationError, match=r"^the lanes model cannot run this tile: the lanes "
                                              r"model has no \$div cell \(engine='verilator' "
                                              r"can\)$"):
        CompiledSystem(MeshConfig(1, 1, n_feat=4, n_tok=2, n_out=4), engine="lanes")
