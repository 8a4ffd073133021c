"""Parameters of the processing element's core and its address map (``docs/pe.md``).

Plain Python, shared by the RTL (:mod:`rtl.core`), the golden model (:mod:`fabric.pe_model`)
and the host codecs.
"""

import dataclasses
from dataclasses import dataclass

from .numfmt import BFloat16, FixedPoint, number_format
from .validate import count, integer
from .wavelet import MAX_COLORS

__all__ = ["Y_BASE", "COUNTER_BASE", "COUNTERS", "CoreColors", "CoreParams"]

Y_BASE = 0x8000
COUNTER_BASE = 0xFF00
COUNTERS = ("busy_cycles", "macs_issued", "macs_skipped_weight", "macs_skipped_act",
            "wavelets_in", "wavelets_out", "stall_cycles", "errors", "overflow")

_MAX_DIM = 4096


@dataclass(frozen=True)
class CoreColors:
    """The colors the core takes (``cmd``, ``weight``, ``psum_from_n``, ``psum_from_s``) and
    sends (``psum_to_s``, ``psum_to_n``, ``out``): distinct integers in 0..31."""
    cmd: int = 8
    weight: int = 9
    psum_from_n: int = 10
    psum_from_s: int = 11
    psum_to_s: int = 12
    psum_to_n: int = 13
    out: int = 14

    def __post_init__(self):
        for f in dataclasses.fields(self):
            object.__setattr__(self, f.name, integer(f.name, getattr(self, f.name),
                                                     0, MAX_COLORS - 1))
        if len(set(dataclasses.astuple(self))) != len(dataclasses.fields(self)):
            raise ValueError(f"colors must be distinct, not {self!r}")


@dataclass(frozen=True)
class CoreParams:
    """One core's parameters (``docs/pe.md``), checked on construction.

    Besides the table in ``docs/pe.md``: ``fmt`` must have ``width <= 16`` (an AXPY carries the
    weight in 16 bits) and ``acc_width <= 32`` (a psum is one 32-bit word), and ``X`` and ``Y``
    must fit their address ranges (``n_feat * n_tok <= 0x8000``, ``n_out * n_tok <= 0x7F00``).
    """
    n_feat: int = 16
    n_tok: int = 8
    n_out: int = 16
    lanes: int = 1
    fmt: FixedPoint | BFloat16 = FixedPoint()
    row: int = 0
    rows: int = 1
    colors: CoreColors = CoreColors()
    col: int = 0
    cols: int = 1

    def __post_init__(self):
        def put(name, value):
            object.__setattr__(self, name, value)

        put("n_feat", integer("n_feat", self.n_feat, 1, _MAX_DIM))
        n_tok = integer("n_tok", self.n_tok)
        if n_tok < 1 or n_tok & (n_tok - 1):
            raise ValueError(f"n_tok must be a power of two, not {n_tok!r}")
        if n_tok > _MAX_DIM:
            raise ValueError(f"n_tok must be at most {_MAX_DIM}, not {n_tok!r}")
        put("n_tok", n_tok)
        put("n_out", integer("n_out", self.n_out, 1, _MAX_DIM))
        lanes = integer("lanes", self.lanes)
        if lanes < 1 or lanes & (lanes - 1) or n_tok % lanes:
            raise ValueError(f"lanes must be a power of two dividing n_tok ({n_tok}), "
                             f"not {lanes!r}")
        put("lanes", lanes)
        fmt = number_format(self.fmt)
        put("fmt", fmt)
        if not isinstance(fmt, (FixedPoint, BFloat16)) or fmt.width > 16 or fmt.acc_width > 32:
            raise ValueError(f"fmt must be a BFloat16, or a FixedPoint with width <= 16 and "
                             f"acc_width <= 32, not {fmt!r}")
        rows = count("rows", self.rows)
        put("rows", rows)
        put("row", integer("row", self.row, 0, rows - 1))
        cols = count("cols", self.cols)
        put("cols", cols)
        put("col", integer("col", self.col, 0, cols - 1))
        if not isinstance(self.colors, CoreColors):
            raise ValueError(f"colors must be a CoreColors, not {self.colors!r}")
        if self.n_feat * n_tok > Y_BASE:
            raise ValueError(f"n_feat * n_tok must be at most {Y_BASE} (X below 0x8000), "
                             f"not {self.n_feat * n_tok!r}")
        if self.n_out * n_tok > COUNTER_BASE - Y_BASE:
            raise ValueError(f"n_out * n_tok must be at most {COUNTER_BASE - Y_BASE} "
                             f"(Y in 0x8000..0xFEFF), not {self.n_out * n_tok!r}")

    def to_dict(self) -> dict:
        """The parameters as a JSON-able dict (``colors`` left at their defaults are omitted);
        :meth:`from_dict` rebuilds them."""
        params = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                  if f.name not in ("fmt", "colors")}
        params["fmt"] = self.fmt.to_dict()
        if self.colors != CoreColors():
            params["colors"] = dataclasses.asdict(self.colors)
        return params

    @classmethod
    def from_dict(cls, params) -> "CoreParams":
        """:class:`CoreParams` from :meth:`to_dict`'s form; unknown keys are ignored (a
        testbench's parameters carry its own entries too)."""
        params = dict(params)
        params["fmt"] = number_format(params.get("fmt", {}))
        if "colors" in params:
            params["colors"] = CoreColors(**params["colors"])
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in params.items() if k in names})

    @property
    def tpb(self) -> int:
        """Tokens per bank: ``n_tok // lanes``."""
        return self.n_tok // self.lanes
