"""A layer as MemoryX streams it: the weights inside the mask, quantised to the datapath format,
grouped by output feature (compressed sparse rows), and the quantised bias: ``int16`` values in
fixed point, ``uint16`` bf16 bit patterns in bf16 (:func:`~host.numbers.quantise`).

This is what crosses SwarmX's links, so its size is the bytes per link. Each system turns it
into the mesh's programs (:mod:`fabric.program`): the forward GEMM streams the nonzero values
of each output's group (a weight inside the mask that quantises to zero is skipped, the
zero-skip); the delta pass streams the transpose; the gradient pass uses the mask's indices.
"""

from dataclasses import dataclass

import numpy as np

from wse.fabric.tiling import SparseRows

from .messages import decode, encode
from .numbers import is_float, quantise

__all__ = ["LayerStream", "quantise"]


@dataclass
class LayerStream:
    """One layer's stream.

    Members
    -------
    name : str
    shape : (n_out, n_in)
    indptr : (n_out + 1,) int32, output ``o``'s weights are
        ``indices[indptr[o]:indptr[o + 1]]`` and ``values[...]``
    indices : (nnz_mask,) int32, input features, ascending within an output
    values : (nnz_mask,) int16, quantised weights (zero where a masked weight rounds to zero);
        uint16 bf16 bit patterns in bf16
    bias : (n_out,) int16 (bf16: uint16), quantised bias
    """
    name: str
    shape: tuple
    indptr: np.ndarray
    indices: np.ndarray
    values: np.ndarray
    bias: np.ndarray

    @classmethod
    def from_dense(cls, name, fmt, W, mask, b):
        """Quantise float ``W`` inside ``mask`` and ``b`` to ``fmt``."""
        mask = np.asarray(mask, dtype=bool)
        rows, cols = np.nonzero(mask)
        q, _ = quantise(fmt, np.asarray(W)[rows, cols])
        bq, _ = quantise(fmt, b)
        indptr = np.zeros(mask.shape[0] + 1, dtype=np.int32)
        np.cumsum(np.bincount(rows, minlength=mask.shape[0]), out=indptr[1:])
        dtype = np.uint16 if is_float(fmt) else np.int16
        return cls(name, tuple(mask.shape), indptr, cols.astype(np.int32), q.astype(dtype),
                   bq.astype(dtype))

    @property
    def rows(self):
        """The output feature of every stored weight."""
        return np.repeat(np.arange(self.shape[0]), np.diff(self.indptr))

    @property
    def nnz(self):
        """Nonzero quantised weights (what the forward pass streams)."""
        return int(np.count_nonzero(self.values))

    def weights(self):
        """The nonzero quantised weights as :class:`~fabric.tiling.SparseRows` (what the forward
        pass streams; the delta pass streams their transpose)."""
        return SparseRows(self.shape, self.indptr.astype(np.int64),
                          self.indices.astype(np.int64), self.values.astype(np.int64)).nonzero()

    def dense(self):
        """The quantised weights as an ``int64`` ``(n_out, n_in)`` matrix."""
        W = np.zeros(self.shape, dtype=np.int64)
        W[self.rows, self.indices] = self.values
        return W

    def mask(self):
        m = np.zeros(self.shape, dtype=bool)
        m[self.rows, self.indices] = True
        return m

    def to_bytes(self):
        return encode({"name": self.name, "shape": list(self.shape), "indptr": self.indptr,
                       "indices": self.indices, "values": self.values, "bias": self.bias})

    @classmethod
    def from_bytes(cls, data):
        m = decode(data)
        return cls(m["name"], tuple(m["shape"]), m["indptr"], m["indices"], m["values"],
                   m["bias"])
