"""The gates of a masked GEMM (``docs/mesh.md``, "Masked GEMMs"): which tokens each core may
multiply for an output, and the MASK wavelets that set them, in each row's stream."""

import numpy as np

from wse.rtl import isa
from wse.rtl.wavelet import pack

__all__ = ["gates", "mask_words", "with_masks"]


def gates(program):
    """``(n_out, cols, n_tok)`` bool: the gate core column ``c`` needs for output ``o``
    (``mask[o, l * cols + c]`` for local token ``l``; padding tokens, whose ``X`` is 0,
    stay 1 so that they cost no MASK). All ones without a mask."""
    cfg = program.config
    gate = np.ones((program.n_out, cfg.max_tokens), dtype=bool)
    if program.mask is not None:
        gate[:, :program.tokens] = program.mask
    return gate.reshape(program.n_out, cfg.n_tok, cfg.cols).transpose(0, 2, 1)


def mask_words(program):
    """``(n_out, cols, chunks)`` int64: the MASK ``bits`` for each chunk of 16 local tokens
    (tokens past ``n_tok`` are 1), or -1 where the chunk's gate is all ones (no MASK)."""
    cfg = program.config
    chunks = -(-cfg.n_tok // isa.MASK_CHUNK)
    gate = np.ones((program.n_out, cfg.cols, chunks * isa.MASK_CHUNK), dtype=bool)
    gate[:, :, :cfg.n_tok] = gates(program)
    gate = gate.reshape(program.n_out, cfg.cols, chunks, isa.MASK_CHUNK)
    bits = (gate.astype(np.int64) << np.arange(isa.MASK_CHUNK)).sum(axis=3)
    return np.where(bits == (1 << isa.MASK_CHUNK) - 1, -1, bits)


def with_masks(program, streams, positions, rows_w, has_cr):
    """``streams`` with, in each row, the output's MASKs (for every column and chunk that
    is not all ones) in front of its first weight; rows without a weight of an output get
    none (their gate does not matter, and the CR sets it again). ``has_cr[k, r]``: row ``r``
    has a CR for the output at stream position ``k``."""
    cfg = program.config
    words = mask_words(program)
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
        stream, at = streams[r], 0
        merged = []
        for k, (n, cr) in enumerate(zip(counts, crs)):
            if n:
                merged.extend(masks[k])
            merged.extend(stream[at:at + n + cr])       # the weights and the CR
            at += n + cr
        out[r] = merged
    return out
