"""A layer as MemoryX streams it: the weights inside the mask, quantised to the datapath format,
as compressed rows by output feature (:class:`~fabric.tiling.SparseRows`, the one form weights
take from MemoryX to the tiles), and the quantised bias: ``int16`` values in int16, ``uint16``
bf16 bit patterns in bf16 (:func:`~host.numbers.quantise`).

This is what crosses SwarmX's links, as its arrays inside each request (:meth:`LayerStream.fields`,
encoded once with the request by :mod:`host.messages`), so its size is the bytes per link. Each
system turns it into the mesh's programs (:mod:`fabric.program`): the forward GEMM streams the
nonzero values of each output's row (a weight inside the mask that quantises to zero is skipped,
the zero-skip); the delta pass streams the transpose; the gradient pass uses the mask's indices.
"""

from dataclasses import dataclass, field

import numpy as np

from wse.fabric.tiling import SparseRows

from .messages import size
from .numbers import quantise

__all__ = ["LayerStream", "quantise"]


@dataclass(frozen=True)
class LayerStream(SparseRows):
    """One layer's stream: the compressed rows of every weight inside the mask (explicit zeros
    included where a masked weight rounds to zero), with the layer's name and bias.

    Members
    -------
    shape : (n_out, n_in)
    indptr : (n_out + 1,) int32
    indices : (nnz_mask,) int32, input features, ascending within an output
    values : (nnz_mask,) int16, quantised weights; uint16 bf16 bit patterns in bf16
    name : str
    bias : (n_out,) int16 (bf16: uint16), quantised bias
    """
    name: str = field(kw_only=True)
    bias: np.ndarray = field(kw_only=True)

    @classmethod
    def from_dense(cls, name, fmt, W, mask, b):
        """Quantise float ``W`` inside ``mask`` and ``b`` to ``fmt``."""
        mask = np.asarray(mask, dtype=bool)
        rows, cols = np.nonzero(mask)
        q, _ = quantise(fmt, np.asarray(W)[rows, cols])
        bq, _ = quantise(fmt, b)
        indptr = np.zeros(mask.shape[0] + 1, dtype=np.int32)
        np.cumsum(np.bincount(rows, minlength=mask.shape[0]), out=indptr[1:])
        dtype = np.uint16 if fmt.is_float else np.int16
        return cls(tuple(mask.shape), indptr, cols.astype(np.int32), q.astype(dtype),
                   name=name, bias=bq.astype(dtype))

    @property
    def nnz(self):
        """Nonzero quantised weights (what the forward pass streams)."""
        return int(np.count_nonzero(self.values))

    def weights(self):
        """The nonzero quantised weights as ``int64`` :class:`~fabric.tiling.SparseRows` (what
        the forward pass streams; the delta pass streams their transpose)."""
        return SparseRows(self.shape, self.indptr.astype(np.int64),
                          self.indices.astype(np.int64), self.values.astype(np.int64)).nonzero()

    def mask(self):
        """The mask: where the layer has weights, ``(n_out, n_in)`` bools."""
        m = np.zeros(self.shape, dtype=bool)
        m[self.rows, self.indices] = True
        return m

    def fields(self):
        """The stream as a message's fields (:mod:`host.messages`): what a request carries."""
        return {"name": self.name, "shape": list(self.shape), "indptr": self.indptr,
                "indices": self.indices, "values": self.values, "bias": self.bias}

    @classmethod
    def from_fields(cls, fields):
        """The stream back from :meth:`fields` (as decoded at the other end of a link)."""
        return cls(tuple(fields["shape"]), fields["indptr"], fields["indices"],
                   fields["values"], name=fields["name"], bias=fields["bias"])

    @property
    def nbytes(self):
        """Bytes of the stream on a link: its fields encoded as one message."""
        return size(self.fields())
