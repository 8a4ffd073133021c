"""The ``golden`` backend: the numpy golden model of the mesh behind the
:class:`~wse.runtime.system.System` interface (no cycles)."""

import numpy as np

from wse.fabric import numerics
from wse.fabric.mesh_model import MeshModel
from wse.fabric.reference import gemm_reference

from .system import Exchange, GemmResult, System

__all__ = ["GoldenSystem"]


class GoldenSystem(System):
    """The numpy golden model of the mesh (:class:`fabric.mesh_model.MeshModel`).

    With ``fast``, :meth:`gemm` skips the wavelets and computes the result with
    :func:`fabric.reference.gemm_reference` (bit-identical, thousands of times faster; what
    training uses). It then keeps no memory state (a resident program's ``X`` is the one it
    was compiled with) and gives no counters; ``overflow`` flags a
    requantisation that saturated or a total at the accumulator's limits.
    """

    backend = "golden"

    def __init__(self, config=None, *, fast=False):
        super().__init__(config)
        self.model = MeshModel(self.config)
        self.fast = bool(fast)

    def gemm(self, program, *, counters=True):
        if not self.fast:
            return super().gemm(program, counters=counters)
        self.check_program(program)
        Y, totals = gemm_reference(self.config, program, program.X)
        overflow = _overflowed(self.config.fmt, totals, program.raw)
        return GemmResult(y=totals if program.raw else Y, cycles=None, load_cycles=None,
                          read_cycles=None, overflow=overflow, program=program)

    def _exchange(self, streams):
        outlets = self.model.exchange(streams)
        return Exchange(outlets=outlets, cycles=None, error=bool(self.model.error),
                        overflow=bool(self.model.overflow))


def _overflowed(fmt, totals, raw):
    """Whether the mesh's overflow flag would be set by a GEMM with these totals: fixed point,
    a total at a bound of the accumulator (it saturated, or may have) or, requantised, beyond
    the operand range (raw totals leave without requantisation: CR_OUT); bf16, a total that is
    not finite (every accumulator starts at +0, and a value that is not finite stays so along
    the chain to its total, so some finite accumulator became one: the flag) or, requantised,
    a finite one that rounds to ``±inf``."""
    if fmt.is_float:
        _, rounded = numerics.requantise(fmt, totals)
        return bool((~np.isfinite(numerics.as_float32(totals))).any()
                    or (rounded.any() and not raw))
    _, saturated = numerics.requantise(fmt, totals)
    return bool((saturated.any() and not raw) or (totals <= fmt.acc_min).any()
                or (totals >= fmt.acc_max).any())
