"""One GEMM on a System, compiled and run: what the tests that are not about compiling share
(:meth:`wse.runtime.system.System.gemm` takes a compiled program)."""

from wse.fabric.compiler import compile_gemm
from wse.fabric.tuning import tune_gemm


def run_gemm(system, W, X, *, counters=True, tune=False, **options):
    """``W @ X`` compiled for ``system``'s mesh (``options``: :func:`compile_gemm`'s; ``tune``:
    the program :func:`tune_gemm` picks) and run there; the
    :class:`~wse.runtime.system.GemmResult`."""
    program = (tune_gemm if tune else compile_gemm)(system.config, W, X, **options)
    return system.gemm(program, counters=counters)
