"""``wse bench sim``: how fast the RTL simulates, compiled against cocotb, mesh by mesh.

For each mesh size, one GEMM program sized to the mesh (``out = in = 32 x rows`` features,
``8 x cols`` tokens, half the weights pruned) runs on the compiled backend
(:class:`runtime.compiled.CompiledSystem`) as the lanes model and, up to
``verilator_max_tiles`` tiles (flat builds), as Verilator's model on the same harness, and,
where that is practical (up to ``cocotb_max_tiles`` tiles), on the cocotb path
(``verilator-cocotb``, the same RTL) in the same run. All must give the reference's result and
the same cycle count. The ``compiled_*`` figures are the model the backend picks for that mesh
by default (``engine``: lanes above ``LANES_ABOVE`` tiles). The figures are the
compute phase's (one exchange: the weights streamed and the totals streamed out), timed from
Python around the exchange; ``free_running_cycles_per_second`` is the same exchange timed
inside the simulator's C++ loop, with its inputs already there (the limit of this model on
this machine), and ``harness_efficiency`` their ratio. Verilator's ``--threads`` is measured on
the largest mesh (the most tiles), one thread against each count asked for.
"""

import time

import numpy as np

from wse.fabric.compiler import compile_gemm
from wse.fabric.config import gemm_config, parse_mesh
from wse.fabric.reference import gemm_reference
from wse.rtl.validate import count, number
from wse.runtime import CompiledSystem, open_system
from wse.runtime.compiled import LANES_ABOVE

from .gemm import prune, random_operands

__all__ = ["bench_sim", "DEFAULT_MESHES"]

#: The meshes ``wse bench sim`` measures by default.
DEFAULT_MESHES = ("4x4", "8x8", "16x16")


def _case(rows, cols, sparsity, seed):
    """The GEMM of a ``rows x cols`` mesh: ``(config, program, X, shape text, nonzeros)``."""
    out_f, in_f, tokens = 32 * rows, 32 * rows, 8 * cols
    config = gemm_config((rows, cols), out_f, in_f, tokens, raw=True)
    W0, X = random_operands(out_f, in_f, tokens, seed=seed)
    W = prune(W0, sparsity, seed=seed)
    program = compile_gemm(config, W, X, raw=True)
    return config, program, X, f"{out_f}x{in_f}x{tokens}", int(np.count_nonzero(W))


def _timed(system, streams, min_seconds, max_runs):
    """Run ``streams`` as one exchange until ``min_seconds`` have passed (at least once, at
    most ``max_runs`` times); ``(exchange, seconds per run, loop seconds per run)``."""
    runs, elapsed, loop = 0, 0.0, 0.0
    while True:
        before = getattr(system, "loop_seconds", 0.0)
        started = time.perf_counter()
        result = system.launch(streams)
        elapsed += time.perf_counter() - started
        loop += getattr(system, "loop_seconds", 0.0) - before
        runs += 1
        if elapsed >= min_seconds or runs >= max_runs:
            return result, elapsed / runs, loop / runs


def _run(backend, config, program, X, *, min_seconds, max_runs, **options):
    """One backend's measurement: ``(figures, raw totals, cycles)``."""
    opened = time.perf_counter()
    with open_system(backend, config, **options) as system:
        open_seconds = time.perf_counter() - opened
        system.exchange(program.load_streams(X))
        result, seconds, loop = _timed(system, program.streams, min_seconds, max_runs)
        if result.error:
            raise RuntimeError(f"the {backend} mesh reported an error during {program!r}")
        totals = program.decode_raw(result.outlets)
        figures = {"seconds": seconds, "cycles_per_second": result.cycles / seconds,
                   "open_seconds": open_seconds}
        if isinstance(system, CompiledSystem):
            figures["free_running_cycles_per_second"] = result.cycles / loop
            figures["build_seconds"] = system.harness.build_seconds
            figures["hierarchical"] = system.harness.hierarchical
            figures["engine"] = system.harness.engine
    return figures, totals, result.cycles


def bench_sim(meshes=DEFAULT_MESHES, *, sparsity=0.5, seed=1, cocotb_max_tiles=16,
              verilator_max_tiles=64, threads=(2,), min_seconds=1.0, progress=None):
    """Measure each of ``meshes`` (``"RxC"`` or ``(rows, cols)``); returns ``{"meshes": [rows
    of figures], "threads": {...}}`` (see ``docs/sim.md`` for every key).

    A compiled result that differs from the reference, or a cycle count that differs from the
    cocotb path's, raises ``RuntimeError``: the speed of a wrong simulation is no figure.
    """
    shapes = [parse_mesh(m) if isinstance(m, str) else tuple(m) for m in meshes]
    if not shapes:
        raise ValueError("meshes must name at least one mesh")
    number("sparsity", sparsity, 0, 1, open_hi=True)
    cocotb_max_tiles = count("cocotb_max_tiles", cocotb_max_tiles, 0)
    verilator_max_tiles = count("verilator_max_tiles", verilator_max_tiles, 0)
    say = progress or (lambda line: None)
    rows_out, cases = [], {}
    for rows, cols in shapes:
        config, program, X, shape, nnz = cases[rows, cols] = _case(rows, cols, sparsity, seed)
        reference = gemm_reference(config, program, X)[1]
        models = {}                 # engine -> (figures, totals, cycles)
        say(f"{rows}x{cols}: building and running the lanes model")
        models["lanes"] = _run("verilator", config, program, X, min_seconds=min_seconds,
                               max_runs=50, engine="lanes")
        default = "lanes" if rows * cols > LANES_ABOVE else "verilator"
        if rows * cols <= verilator_max_tiles or default == "verilator":
            say(f"{rows}x{cols}: building and running Verilator's model")
            models["verilator"] = _run("verilator", config, program, X,
                                       min_seconds=min_seconds, max_runs=50,
                                       engine="verilator", hierarchical=False)
        _, totals, cycles = models["lanes"]
        if not np.array_equal(totals, reference):
            raise RuntimeError(f"the compiled {rows}x{cols} mesh's GEMM differs from the "
                               f"reference")
        if "verilator" in models and (models["verilator"][2] != cycles or not np.array_equal(
                models["verilator"][1], totals)):
            raise RuntimeError(f"{rows}x{cols}: the lanes model took {cycles} cycles, "
                               f"Verilator's {models['verilator'][2]}"
                               + ("" if np.array_equal(models["verilator"][1], totals)
                                  else ", and their results differ"))
        compiled = models[default][0]
        verilated = models.get("verilator", (None,))[0]
        row = {"mesh": f"{rows}x{cols}", "tiles": rows * cols,
               "shape": shape, "nnz": nnz,
               "cycles": cycles,
               "engine": default,
               "compiled_cycles_per_second": compiled["cycles_per_second"],
               "free_running_cycles_per_second": compiled["free_running_cycles_per_second"],
               "harness_efficiency": (compiled["cycles_per_second"]
                                      / compiled["free_running_cycles_per_second"]),
               "pe_cycles_per_second": compiled["cycles_per_second"] * rows * cols,
               "build_seconds": compiled["build_seconds"],
               "hierarchical": compiled["hierarchical"],
               "lanes_cycles_per_second": models["lanes"][0]["cycles_per_second"],
               "verilator_cycles_per_second": verilated and verilated["cycles_per_second"],
               "lanes_vs_verilator": verilated and (models["lanes"][0]["cycles_per_second"]
                                                    / verilated["cycles_per_second"]),
               "cocotb_cycles_per_second": None, "speedup": None}
        if rows * cols <= cocotb_max_tiles:
            say(f"{rows}x{cols}: the same program under cocotb")
            cocotb, cocotb_totals, cocotb_cycles = _run(
                "verilator-cocotb", config, program, X, min_seconds=0, max_runs=1)
            if cocotb_cycles != cycles or not np.array_equal(cocotb_totals, totals):
                raise RuntimeError(f"{rows}x{cols}: the compiled model took {cycles} cycles, "
                                   f"the cocotb path {cocotb_cycles}"
                                   + ("" if np.array_equal(cocotb_totals, totals)
                                      else ", and their results differ"))
            row["cocotb_cycles_per_second"] = cocotb["cycles_per_second"]
            row["speedup"] = compiled["cycles_per_second"] / cocotb["cycles_per_second"]
        rows_out.append(row)
    largest = max(range(len(shapes)), key=lambda k: shapes[k][0] * shapes[k][1])
    return {"meshes": rows_out, "threads": _threads(cases[shapes[largest]], threads, min_seconds,
                                                    rows_out[largest], say)}


def _threads(case, threads, min_seconds, single, say):
    """Verilator ``--threads`` on the mesh of ``case`` (:func:`_case`): ``{"mesh", "1":
    cycles/s, "<n>": cycles/s, ...}`` (each ``n`` a build of its own; Verilator's model, not
    the lanes model, which has no threads)."""
    config, program, X, _, _ = case
    rows, cols = config.rows, config.cols
    result = {"mesh": f"{rows}x{cols}"}
    for n in sorted(set(threads) | {1}):
        say(f"{rows}x{cols}: building and running with --threads {n}")
        figures, _, cycles = _run("verilator", config, program, X, min_seconds=min_seconds,
                                  max_runs=50, engine="verilator", threads=n)
        if cycles != single["cycles"]:
            raise RuntimeError(f"Verilator with --threads {n} took {cycles} cycles, the lanes "
                               f"model {single['cycles']}")
        result[str(n)] = figures["cycles_per_second"]
    return result
