"""The gates of a masked GEMM (``docs/mesh.md``, "Masked GEMMs"): which tokens each core may
multiply for an output, and the MASK wavelets that set them, in each row's stream."""

import numpy as np

from wse.rtl import isa
from wse.rtl.wavelet import pack

__all__ = ["gates", "mask_words", "with_masks"]


def gates(program, mask=None):
    """``(n_out, cols, n_tok)`` bool: the gate core column ``c`` needs for output ``o``
    (``mask[o, l * cols + c]`` for local token ``l``; padding tokens, past the program's
    tokens, are off), of ``program.mask`` unless ``mask`` is given. Without either, the gate
    every carriage return leaves: the column's active tokens
    (:meth:`GemmProgram.active_tokens`)."""
    cfg = program.config
    mask = program.mask if mask is None else mask
    gate = np.zeros((program.n_out, cfg.max_tokens), dtype=bool)
    gate[:, :program.tokens] = True if mask is None else mask
    return gate.reshape(program.n_out, cfg.n_tok, cfg.cols).transpose(0, 2, 1)


def _chunk_bits(gate):
    """``(..., chunks)`` int64: a gate ``(..., n_tok)`` as MASK ``bits``, 16 tokens a chunk."""
    n_tok = gate.shape[-1]
    chunks = -(-n_tok // isa.MASK_CHUNK)
    padded = np.zeros((*gate.shape[:-1], chunks * isa.MASK_CHUNK), dtype=bool)
    padded[..., :n_tok] = gate
    padded = padded.reshape(*gate.shape[:-1], chunks, isa.MASK_CHUNK)
    return (padded.astype(np.int64) << np.arange(isa.MASK_CHUNK)).sum(axis=-1)


def mask_words(program, mask=None):
    """``(n_out, cols, chunks)`` int64: the MASK ``bits`` for each chunk of 16 local tokens
    (of ``program.mask``, or ``mask``), or -1 where the chunk's gate is the one a carriage
    return leaves (the column's active tokens: no MASK needed)."""
    cfg = program.config
    bits = _chunk_bits(gates(program, mask))
    active = np.arange(cfg.n_tok)[None, :] < program.active_tokens()[:, None]
    return np.where(bits == _chunk_bits(active)[None], -1, bits)


def with_masks(program, streams, positions, rows_w, has_cr, *, keep=False):
    """``streams`` with, in each row that takes part in an output (a weight or a CR of it),
    the output's MASKs (for every column and chunk whose gate differs from the active tokens)
    in front of its first weight or its CR: every row of a reduction chain must gate the same
    tokens, since the partial-sum engines visit only those. ``has_cr[k, r]``: row ``r`` has a
    CR for the output at stream position ``k``. ``keep``: the gates of a CR_DELTA program's
    ``keep``, in the owner row only (its engine visits every active token and keeps the
    gated ones; the other rows' engines visit every active token too, ungated)."""
    cfg = program.config
    words = mask_words(program, program.keep if keep else None)
    order = program.output_order
    masks = []
    for o in order.tolist():
        c, k = np.nonzero(words[o] >= 0)
        masks.append(pack(isa.mask_data(c, k, words[o][c, k]), cfg.plan.weight, 1).tolist()
                     if c.size else [])
    out = {}
    for r in range(cfg.rows):
        counts = np.bincount(positions[rows_w == r], minlength=program.n_out).tolist()
        crs = has_cr[:, r].astype(int).tolist()
        gets = (program.out_placement.row_of[order] == r if keep else
                np.ones(program.n_out, dtype=bool)).tolist()
        stream, at = streams[r], 0
        merged = []
        for k, (n, cr, get) in enumerate(zip(counts, crs, gets)):
            if (n or cr) and get:
                merged.extend(masks[k])
            merged.extend(stream[at:at + n + cr])       # the weights and the CR
            at += n + cr
        out[r] = merged
    return out
