"""``wse bench gemm``: a pruned GEMM on the mesh against its dense original, measured.

One measurement point takes a dense random ``W0`` (every weight nonzero), prunes it by magnitude
to a sparsity ``s`` and runs ``Y = W @ X`` three times on one :class:`~runtime.system.System`: the
sparse ``W`` (only its nonzeros streamed), the same ``W`` with its zeros streamed as explicit
weights, and the dense ``W0``, each as the program the cycle model finds fastest
(:func:`~fabric.tuning.tune_gemm`). Every result is checked bit for bit against
:func:`fabric.reference.gemm_reference`; the figures say how close the sparse run comes to the
ideal ``1 / (1 - s)`` speedup and what holds it back. :func:`sweep_gemm` does that for a range of
sparsities on one System (one simulator build, one dense run) and :func:`plot_sweep` draws it.

``fmt`` chooses the number format: int16 operands are integers in ``±(1..SCALE)``; bf16 ones
are normal random numbers rounded to bf16 (as bit patterns, what the mesh carries), pruned by
magnitude the same way.

The golden backend has no cycle model: its points carry the figures that exist (results,
counters, ideal cycles) and ``None`` for every figure derived from cycles.
"""

import numpy as np

from wse.fabric import numerics
from wse.fabric.config import gemm_config, parse_mesh
from wse.fabric.cycle_model import predict_cycles, predict_io_cycles
from wse.fabric.reference import gemm_reference
from wse.fabric.tuning import tune_gemm
from wse.rtl.numfmt import number_format
from wse.rtl.validate import count, number
from wse.runtime import open_system

__all__ = [
    "SCALE",
    "SWEEP_SPARSITIES",
    "bench_gemm",
    "plot_sweep",
    "prune",
    "random_operands",
    "sweep_gemm",
]

#: The sparsities of ``wse bench gemm --sweep``.
SWEEP_SPARSITIES = (0, .25, .5, .75, .8, .85, .9, .95, .98, .99)

#: Weights and activations are drawn from ``±(1..SCALE)``: products up to ``SCALE**2`` keep a
#: 64-input dot product well inside the int32 accumulator and its requantised value in int16.
SCALE = 300


def random_operands(out_features, in_features, tokens, *, act_sparsity=0.0, seed=1, fmt=None):
    """``(W0, X)``: a dense ``W0`` with every weight in ``±(1..SCALE)`` and ``X`` in the same
    range with exactly ``round(act_sparsity * X.size)`` zeros at random places. In bf16
    (``fmt``), standard normal numbers rounded to bf16, as bit patterns (none is zero: a
    rounding to zero is redrawn as 1)."""
    rng = np.random.default_rng(seed)
    fmt = number_format(fmt)

    def draw(shape):
        if fmt.is_float:
            values = rng.standard_normal(shape)
            return numerics.encode(fmt, np.where(values == 0, 1.0, values))[0]
        return rng.integers(1, SCALE + 1, shape) * rng.choice((-1, 1), shape)

    W0, X = draw((out_features, in_features)), draw((in_features, tokens))
    X.flat[rng.permutation(X.size)[:round(act_sparsity * X.size)]] = 0
    return W0, X


def prune(W0, sparsity, *, seed=0, fmt=None):
    """``W0`` with its ``round(sparsity * W0.size)`` smallest-magnitude weights set to zero;
    ties go by a random order fixed by ``seed``, so a higher sparsity prunes a superset. In
    bf16 (``fmt``) ``W0`` holds finite bit patterns, whose magnitude bits order as the values'
    magnitudes do."""
    W0 = np.asarray(W0)
    tiebreak = np.random.default_rng(seed).random(W0.size)
    magnitude = W0 & 0x7FFF if number_format(fmt).is_float else np.abs(W0)
    smallest_first = np.lexsort((tiebreak, magnitude.ravel()))
    W = W0.copy()
    W.flat[smallest_first[:round(sparsity * W0.size)]] = 0
    return W


def bench_gemm(*, mesh=(4, 4), sparsity=0.9, out_features=64, in_features=64, tokens=32,
               act_sparsity=0.0, backend="verilator", seed=1, fmt=None, config_overrides=None,
               progress=None):
    """Measure one sparsity (see the module docstring); returns the figures as a dict:

    ``cycles`` (compute phase of the sparse GEMM, also as ``compute_cycles``), ``model_cycles``
    (:mod:`fabric.cycle_model`), ``default_model_cycles`` (the model's figure for
    :func:`~fabric.compiler.compile_gemm`'s default program, which the tuner improved on
    where ``model_cycles`` is lower), ``ideal_cycles`` (useful MACs over the mesh's
    MACs), ``dense_cycles`` (the unpruned ``W0``), ``speedup_vs_dense`` (compute phases),
    ``ideal_speedup`` (the dense GEMM's useful MACs over the sparse one's, ``1 / (1 -
    sparsity)`` with no zero activation), ``io_cycles`` (the sparse GEMM's edge transfers:
    loading ``X``, reading ``Y``; the dense GEMM's are the same words), ``model_io_cycles``,
    ``speedup_with_io`` (dense over sparse, both with their edge transfers),
    ``zeros_streamed_cycles`` (``W`` with its zeros streamed),
    ``utilisation`` (ideal / cycles), ``psum_overhead_cycles_per_output`` (cycles the busiest
    core spent on anything but AXPYs, per output), ``bit_exact``, ``macs_issued``,
    ``macs_skipped_weight``, ``macs_skipped_act`` (summed over the mesh, sparse run), ``nnz``,
    ``mesh``, ``shape`` (``"out x in x tokens"``), ``sparsity``, ``act_sparsity``, ``backend``,
    ``format`` and ``limits`` (what keeps utilisation below 1, in words).

    ``RuntimeError`` when the mesh reports an error (a dropped wavelet, a bad command).
    """
    return sweep_gemm((sparsity,), mesh=mesh, out_features=out_features,
                      in_features=in_features, tokens=tokens, act_sparsity=act_sparsity,
                      backend=backend, seed=seed, fmt=fmt,
                      config_overrides=config_overrides, progress=progress)[0]


def sweep_gemm(sparsities=SWEEP_SPARSITIES, *, mesh=(4, 4), out_features=64, in_features=64,
               tokens=32, act_sparsity=0.0, backend="verilator", seed=1, fmt=None,
               config_overrides=None, progress=None):
    """:func:`bench_gemm` for each of ``sparsities`` on one System, with one dense run; returns
    the list of figure dicts. ``progress`` (a callable taking a line of text) hears of each
    run."""
    rows, cols = parse_mesh(mesh) if isinstance(mesh, str) else mesh
    shape = [count(name, value) for name, value in (
        ("out_features", out_features), ("in_features", in_features), ("tokens", tokens))]
    sparsities = [number("sparsity", s, 0, 1, open_hi=True) for s in sparsities]
    act_sparsity = number("act_sparsity", act_sparsity, 0, 1)
    fmt = number_format(fmt)
    config = gemm_config((rows, cols), *shape, fmt=fmt, **(config_overrides or {}))
    say = progress or (lambda line: None)
    W0, X = random_operands(*shape, act_sparsity=act_sparsity, seed=seed, fmt=fmt)
    common = {"mesh": f"{rows}x{cols}", "shape": "x".join(map(str, shape)),
              "act_sparsity": act_sparsity, "backend": backend,
              "format": fmt.name}
    with open_system(backend, config) as system:
        say(f"{backend}: dense {common['shape']} GEMM on the {common['mesh']} mesh")
        dense, dense_exact = _run(system, W0, X)
        points = []
        for s in sparsities:
            W = prune(W0, s, seed=seed, fmt=fmt)
            say(f"{backend}: sparsity {s:g} ({np.count_nonzero(W)} nonzeros), sparse and "
                f"zeros streamed")
            sparse, sparse_exact = _run(system, W, X)
            zeros, zeros_exact = _run(system, W, X, zeros=True)
            exact = (dense_exact and sparse_exact and zeros_exact
                     and np.array_equal(sparse.y, zeros.y))
            points.append(_figures(sparse, zeros, dense, X, s, exact) | common)
    return points


def _run(system, W, X, **kwargs):
    """``(GemmResult, bit_exact)``: one GEMM, its program chosen by the cycle model
    (:func:`~fabric.tuning.tune_gemm`), and whether it equals the reference."""
    result = system.gemm(tune_gemm(system.config, W, X, **kwargs))
    if result.error:
        raise RuntimeError(f"the {system.backend} mesh reported an error during a "
                           f"{result.program!r}")
    return result, np.array_equal(result.y, gemm_reference(system.config, result.program, X)[0])


def _figures(sparse, zeros, dense, X, sparsity, exact):
    program = sparse.program
    ideal = program.ideal_cycles(X)
    # a carriage return costs no busy cycle (docs/pe.md): a core's busy cycles are its AXPYs
    axpy = sparse.counters["busy_cycles"]
    cycles = sparse.cycles
    timed = cycles is not None
    io = None if sparse.load_cycles is None else sparse.load_cycles + sparse.read_cycles
    dense_io = None if dense.load_cycles is None else dense.load_cycles + dense.read_cycles
    figures = {
        "cycles": cycles,
        "compute_cycles": cycles,
        "model_cycles": predict_cycles(program, X),
        "default_model_cycles": program.tuned["default_cycles"],
        "ideal_cycles": ideal,
        "dense_cycles": dense.cycles,
        "speedup_vs_dense": _ratio(dense.cycles, cycles),
        "ideal_speedup": _ratio(dense.program.useful_macs(X), program.useful_macs(X)),
        "io_cycles": io,
        "model_io_cycles": predict_io_cycles(program, X),
        "speedup_with_io": (None if io is None or dense_io is None or cycles is None
                            else _ratio(dense.cycles + dense_io, cycles + io)),
        "zeros_streamed_cycles": zeros.cycles,
        "utilisation": _ratio(ideal, cycles),
        "psum_overhead_cycles_per_output":
            _ratio(cycles - int(axpy.max()), program.n_out) if timed else None,
        "bit_exact": bool(exact),
    }
    for name in ("macs_issued", "macs_skipped_weight", "macs_skipped_act"):
        figures[name] = int(sparse.counters[name].sum())
    figures.update(nnz=program.nnz, sparsity=sparsity,
                   limits=_limits(cycles, ideal, axpy,
                                  sparse.counters["stall_cycles"]))
    return figures


def _ratio(a, b):
    """``a / b`` to 4 decimals, or ``None`` when a cycle count is missing."""
    return None if a is None or b is None else round(a / b, 4)


def _limits(cycles, ideal, axpy, stalls):
    """What keeps utilisation below 1, in one sentence, from the busiest core's figures."""
    busiest = np.unravel_index(axpy.argmax(), axpy.shape)
    work = int(axpy[busiest])
    if cycles is None:
        return (f"golden model: no cycle count; the busiest core's AXPYs take {work} cycles "
                f"against an ideal of {ideal} ({work - ideal} of imbalance)")
    stall = int(stalls[busiest])
    losses = {"row/column imbalance": work - ideal,
              "waits (for a free accumulator buffer, or a carriage return's own cycle)": stall,
              "fill, drain and psum hand-offs": cycles - work - stall}
    parts = ", ".join(f"{value} {name}" for name, value in losses.items())
    worst = max(losses, key=losses.get)
    return (f"of {cycles} cycles {ideal} are ideal MAC work ({ideal / cycles:.0%}); the busiest "
            f"core {busiest[0]},{busiest[1]} adds {parts}: mostly {worst}")


def plot_sweep(points, path):
    """Draw :func:`sweep_gemm`'s ``points`` as a PNG at ``path``: measured speedup against the
    dense run beside the ideal ``1 / (1 - s)`` (log scale), and utilisation below."""
    from matplotlib.figure import Figure  # drawn by Agg, without pyplot's global state

    first = points[0]
    s = np.array([p["sparsity"] for p in points])
    timed = [p for p in points if p["cycles"] is not None]
    curve = np.linspace(0, max(s.max(), 0.99), 200)
    fig = Figure(figsize=(7, 6.5), layout="tight")
    top, bottom = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": (3, 2)})
    top.plot(curve, 1 / (1 - curve), "-", color="0.55", label="ideal 1 / (1 - s)")
    if timed:
        ts = [p["sparsity"] for p in timed]
        top.plot(ts, [p["speedup_vs_dense"] for p in timed], "o-", color="C0",
                 label="measured: sparse W streamed")
        top.plot(ts, [p["dense_cycles"] / p["zeros_streamed_cycles"] for p in timed], "x",
                 color="C3", label="zeros streamed as weights")
        bottom.plot(ts, [p["utilisation"] for p in timed], "s-", color="C2")
    else:
        for axis in (top, bottom):
            axis.text(0.5, 0.5, f"{first['backend']}: no cycle counts", ha="center",
                      transform=axis.transAxes, color="0.4")
    top.set_yscale("log")
    top.set_ylabel("speedup vs dense (cycles)")
    top.legend(loc="upper left")
    top.grid(True, which="both", alpha=0.3)
    top.set_title(f"Sparse GEMM {first['shape']} (out x in x tokens) on a {first['mesh']} "
                  f"mesh, {first['backend']}")
    bottom.set_ylim(0, 1.05)
    bottom.set_ylabel("utilisation (ideal / cycles)")
    bottom.set_xlabel("weight sparsity s")
    bottom.grid(True, alpha=0.3)
    fig.savefig(path, dpi=120)
    return path
