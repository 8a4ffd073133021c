"""One GEMM on a System, compiled and run: what the tests that are not about compiling share
(:meth:`wse.runtime.system.System.gemm` takes a compiled program)."""

from wse.fabric.compiler import compile_gemm


def run_gemm(system, W, X, *, counters=True, **options):
    """``W @ X`` compiled for ``system``'s mesh (``options``: :func:`compile_gemm`'s) and run
    there; the :class:`~wse.runtime.system.GemmResult`."""
    return system.gemm(compile_gemm(system.config, W, X, **options), counters=counters)
