"""The GEMM program: ``Y = W @ X`` as wavelet streams for a mesh (``docs/mesh.md``).

:func:`~.compiler.compile_gemm` (or :func:`~.compiler.compile_gemm_csr`, from compressed
rows) lays a GEMM out on a :class:`~fabric.config.MeshConfig` and returns a
:class:`GemmProgram`, which holds everything the host sends and everything it needs to make
sense of what comes back:

- tokens are dealt to columns: token ``t`` lives in column ``t % cols`` at local token
  ``t // cols``;
- input features go to rows by a :class:`Placement` (*balanced* by default: the features with
  the most nonzero weights first, dealt round-robin), output features to their owner rows by
  another (*spanning* unless given: inside the rows that hold each output's weights);
- :attr:`GemmProgram.streams`: per row, for each output ``o`` in stream order
  (:attr:`GemmProgram.output_order`), the nonzero weights
  ``W[o, i]`` of that row's features (in order of ``i``) as ``(value, slot)`` weight wavelets,
  then a carriage return ``slot_out[o] * rows + row_out[o]`` (``CR``, or ``CR_OUT`` for raw
  results) with the flags that say which neighbours' psums the row takes, in every row that
  takes part in the output's reduction (:meth:`GemmProgram.cr_flags`); a *masked* program
  (``mask``) puts in front of an output's weights the MASKs that gate each column's tokens
  (:meth:`GemmProgram.mask_words`);
- :meth:`GemmProgram.load_streams` is the host's copy of ``X`` into the cores (``SELECT c``,
  ``ADDR 0`` and ``LOAD`` on ``cmd``), :meth:`GemmProgram.read_streams` the ``READ`` of each
  core's ``Y`` slots (one exchange per group of rows with distinct reply colors);
  :meth:`GemmProgram.read_blocks`, :meth:`GemmProgram.decode_y` and
  :meth:`GemmProgram.decode_raw` turn the replies back into ``Y``.

Everything is numpy and vectorised over the weights: a 512x512 ``W`` compiles in a few tens of
milliseconds. Wavelets are packed 38-bit words as Python ints (:mod:`rtl.isa`).
"""

import math

import numpy as np

from wse.rtl import isa
from wse.rtl.validate import readonly
from wse.rtl.wavelet import pack

from . import loads, masking, numerics, replies, spans

__all__ = ["GemmProgram", "MAX_READ"]

#: Words one READ fetches at most (its ``len`` field, :class:`~rtl.isa.ReadArg`).
MAX_READ = replies.MAX_READ


# The program --------------------------------------------------------------------------------------

class GemmProgram:
    """A compiled ``Y = W @ X`` for one mesh; build it with :func:`~.compiler.compile_gemm`
    (from a dense ``W``) or :func:`~.compiler.compile_gemm_csr` (from compressed rows): the two
    give the same program.

    Members
    -------
    config : MeshConfig
    weights : SparseRows, the nonzero weights by output (what the streams carry).
    W : (n_out, n_in) int64, the weights (read-only; made from ``weights`` on first use when
        the program was compiled from compressed rows).
    X : (n_in, tokens) int64 or None, the activations given to :func:`compile_gemm`.
    in_placement, out_placement : Placement of the input and output features.
    n_out, n_in, tokens : int
    raw : bool, results leave raw (``CR_OUT``) instead of being requantised into ``Y``.
    act : bool, results are requantised, go through a ReLU into ``X`` at the output placement
        and leave as they are written (``CR_ACT``: a resident layer's output).
    bias : (n_out,) int64 or None, added to each output's total (a weight on the ones slot in
        the owner row's stream, after its weights; none where 0).
    load : bool, whether :meth:`load_streams` loads ``X`` (``False``: the cores hold it).
    keep : (n_out, tokens) bool or None: a ``CR_DELTA`` program, each result written into
        ``X`` where ``keep``, 0 elsewhere, and sent out: the owner row's MASKs gate each
        output's AXPYs by ``keep``, and its engine writes every active token.
    zeros : bool, zero weights are streamed too.
    spans : bool, each row's carriage returns say which psums it skips (:meth:`cr_flags`).
    order : (n_out,) int64 or None, the outputs in stream order (:attr:`output_order`).
    tuned : dict or None, what :func:`~.tuning.tune_gemm` found when it chose this program.
    mask : (n_out, tokens) bool or None: a masked GEMM computes ``Y[o, t]`` only where
        ``mask[o, t]`` (0 elsewhere): each row's stream gates its cores' tokens with MASKs
        before an output's weights (``docs/mesh.md``, "Masked GEMMs").
    streams : dict row -> list of packed wavelets (ints): MASKs, weights and carriage returns.
    nnz : int, weights streamed (all of ``W`` with ``zeros``; none of an output whose mask
        row is empty).
    weights_per_row : (rows,) int64, weights streamed into each row.
    """

    def __init__(self, config, weights, X, tokens, in_placement, out_placement, raw, zeros,
                 W=None, mask=None, spans=True, act=False, bias=None, load=True, keep=None,
                 order=None):
        self.config = config
        self.weights = weights
        self._W = None if W is None else readonly(W)
        self.X = None if X is None else readonly(X)
        self.n_out, self.n_in = weights.shape
        self.tokens = tokens
        self.in_placement = in_placement
        self.out_placement = out_placement
        self.raw = raw
        self.act = bool(act)
        self.bias = None if bias is None else readonly(bias)
        self.load = bool(load)
        self.keep = None if keep is None else readonly(keep)
        self.zeros = zeros
        self.mask = None if mask is None else readonly(mask)
        self.spans = bool(spans)
        self._order = None if order is None else readonly(order)
        self.tuned = None
        self.streams, self.weights_per_row = self._build_streams()
        self.nnz = int(self.weights_per_row.sum())

    def __repr__(self):
        mode = ("raw" if self.raw else "act" if self.act else
                "delta" if self.keep is not None else "requantised")
        return (f"<GemmProgram {self.n_out}x{self.n_in} @ {self.n_in}x{self.tokens} on a "
                f"{self.config.rows}x{self.config.cols} mesh, {self.nnz} weights, {mode}>")

    @property
    def W(self):
        if self._W is None:
            self._W = readonly(self.weights.dense())
        return self._W

    # Streams ------------------------------------------------------------------------------------

    @property
    def output_order(self):
        """The outputs in stream order: the one given to :func:`~.compiler.compile_gemm`, or
        :func:`~.spans.stream_order` (``docs/mesh.md``, "Streams")."""
        if self._order is None:
            self._order = readonly(spans.stream_order(self))
        return self._order

    @property
    def streamed(self):
        """Whether the results leave during the compute phase (raw totals, or a resident
        layer's activations) rather than being read out of ``Y`` after it."""
        return self.raw or self.act or self.keep is not None

    def cr_args(self):
        """The carriage return argument of each output: ``slot_out * rows + row_out``."""
        return self.out_placement.slot_of * self.config.rows + self.out_placement.row_of

    def weight_rows(self, *, unmasked=False):
        """``(n_out, rows)`` bool: whether row ``r``'s stream carries a weight of output ``o``
        (:func:`~.spans.weight_rows`)."""
        return spans.weight_rows(self, unmasked=unmasked)

    def cr_flags(self, *, unmasked=False):
        """``(skip, quiet_n, quiet_s)``, each ``(n_out, rows)`` bool: the flags of the CR each
        row gets for each output, and the rows that get none (:func:`~.spans.cr_flags`;
        ``docs/mesh.md``, "Partial sums")."""
        return spans.cr_flags(self, unmasked=unmasked)

    def _build_streams(self):
        cfg = self.config
        weight_color = cfg.plan.weight
        if self.zeros:
            o_idx, i_idx = (a.ravel() for a in np.indices((self.n_out, self.n_in)))
            values = self.W[o_idx, i_idx]
        else:
            o_idx, i_idx, values = self.weights.rows, self.weights.indices, self.weights.values
        # Outputs go grouped by owner row (then by index): psums then flow the same way for
        # a run of outputs and the rows' engines overlap (docs/mesh.md, "Streams").
        order = self.output_order
        position = np.empty(self.n_out, dtype=np.int64)
        position[order] = np.arange(self.n_out)
        by_position = np.argsort(position[o_idx], kind="stable")     # keeps i order within
        o_idx, i_idx, values = o_idx[by_position], i_idx[by_position], values[by_position]
        if self.mask is not None:
            # an output whose every token is gated off is 0 whatever its weights: not streamed
            keep = self.streamed_outputs[o_idx]
            o_idx, i_idx, values = o_idx[keep], i_idx[keep], values[keep]
        rows_w = self.in_placement.row_of[i_idx]
        slots = self.in_placement.slot_of[i_idx]
        if self.bias is not None:
            # each nonzero bias: a weight on the ones slot in the owner row, after the weights
            b_idx = np.flatnonzero(~numerics.is_zero(self.config.fmt, self.bias))
            b_idx = b_idx[np.argsort(position[b_idx], kind="stable")]
            merged = np.argsort(np.concatenate([position[o_idx], position[b_idx]]),
                                kind="stable")
            o_idx = np.concatenate([o_idx, b_idx])[merged]
            values = np.concatenate([values, self.bias[b_idx]])[merged]
            rows_w = np.concatenate([rows_w, self.out_placement.row_of[b_idx]])[merged]
            slots = np.concatenate([slots, np.full(b_idx.size, isa.ONES_SLOT)])[merged]
        words = pack(isa.weight_data(numerics.to_wire(self.config.fmt, values), slots),
                     weight_color, 0)
        # a row that skips an output gets no CR for it: it has no weight of it, so nothing to
        # hand over, and no neighbour waits for it (cr_flags)
        skip, quiet_n, quiet_s = (flags[order] for flags in self.cr_flags())
        args = self.cr_args()[order]
        positions = np.arange(self.n_out)
        streams = {}
        for r in range(cfg.rows):
            crs = pack(isa.cr_data(args, raw=self.raw, act=self.act,
                                   delta=self.keep is not None, quiet_n=quiet_n[:, r],
                                   quiet_s=quiet_s[:, r]), weight_color, 1)
            mine = rows_w == r
            # the CR of the output at position k goes after that output's last weight
            at = np.searchsorted(position[o_idx[mine]], positions, side="right")
            kept = ~skip[:, r]
            streams[r] = np.insert(words[mine], at[kept], crs[kept]).tolist()
        if self.mask is not None or self.keep is not None:
            streams = masking.with_masks(self, streams, position[o_idx], rows_w, ~skip,
                                         keep=self.keep is not None)
        return streams, np.bincount(rows_w, minlength=cfg.rows).astype(np.int64)

    # Masks --------------------------------------------------------------------------------------

    @property
    def streamed_outputs(self):
        """Per output, whether its weights are streamed: every output, except in a masked
        program those whose every token is gated off (their results are 0)."""
        if self.mask is None:
            return np.ones(self.n_out, dtype=bool)
        return self.mask.any(axis=1)

    def gates(self):
        """``(n_out, cols, n_tok)`` bool: the gate core column ``c`` needs for output ``o``
        (:func:`~.masking.gates`); all ones without a mask."""
        return masking.gates(self)

    def mask_words(self):
        """``(n_out, cols, chunks)``: each chunk's MASK ``bits``, -1 where none is needed
        (:func:`~.masking.mask_words`)."""
        return masking.mask_words(self)

    def masks_per_output(self):
        """``(n_out, cols)``: the MASK wavelets each column's core runs before an output's
        weights, in a row that streams any."""
        return (self.mask_words() >= 0).sum(axis=2)

    # Activations ------------------------------------------------------------------------------

    def check_x(self, X=None):
        """``X`` (the one given to :func:`compile_gemm` by default) as a checked
        ``(n_in, tokens)`` ``int64`` array of operands."""
        if X is None:
            if self.X is None:
                raise ValueError("no X: give one here or to compile_gemm")
            return self.X
        X = numerics.operands(self.config.fmt, X, "X")
        if X.shape != (self.n_in, self.tokens):
            raise ValueError(f"X must have shape (n_in, tokens) = ({self.n_in}, {self.tokens}), "
                             f"not {X.shape}")
        return X

    def _tiles_of(self, X):
        """``X`` zero-padded to the mesh's tokens as ``(n_in, n_tok, cols)``: ``[i, l, c]`` is
        token ``l * cols + c``."""
        cfg = self.config
        padded = np.zeros((self.n_in, cfg.max_tokens), dtype=np.int64)
        padded[:, :self.tokens] = X
        return padded.reshape(self.n_in, cfg.n_tok, cfg.cols)

    def x_blocks(self, X=None):
        """``{(r, c): (slots_per_row[r], n_tok) int64}``: the ``X`` each core holds, by slot
        and local token, zero-padded."""
        cfg, p = self.config, self.in_placement
        tiles = self._tiles_of(self.check_x(X))
        blocks = {}
        for r, slots in enumerate(self.in_placement.slots_per_row().tolist()):
            mine = p.row_of == r
            row = np.zeros((slots, cfg.n_tok, cfg.cols), dtype=np.int64)
            row[p.slot_of[mine]] = tiles[mine]
            for c in range(cfg.cols):
                blocks[(r, c)] = np.ascontiguousarray(row[:, :, c])
        return blocks

    def active_tokens(self):
        """``(cols,)`` int64: the real tokens of each column (``t % cols == c``, ``t <
        tokens``), what the load's TOKENS sets in its cores."""
        cols = self.config.cols
        return np.maximum(0, -(-(self.tokens - np.arange(cols)) // cols)).astype(np.int64)

    def load_slots(self):
        """``(first, count)``, each ``(rows,)`` int64: the slots a load writes in each row, from
        the row's lowest input slot to its highest (0 and 0 where it holds none; slots in
        between that hold no feature are loaded with zeros)."""
        p, rows = self.in_placement, self.config.rows
        first = np.zeros(rows, dtype=np.int64)
        count = np.zeros(rows, dtype=np.int64)
        for r in range(rows):
            slots = p.slot_of[p.row_of == r]
            if slots.size:
                first[r], count[r] = slots.min(), slots.max() - slots.min() + 1
        return first, count

    def load_streams(self, X=None):
        """``{row: [wavelets]}``: the load exchange (:func:`~.loads.load_streams`): for each
        column ``SELECT``, ``TOKENS`` (the column's :meth:`active_tokens`: every core's engine
        then visits only the real tokens, whatever an earlier GEMM left) and, where the core
        holds features, ``ADDR`` of its first slot (:meth:`load_slots`) and its
        :meth:`x_blocks` block from there in LOAD pairs, the columns' pairs dealt out in
        rounds. A resident program (``load=False``), whose cores hold ``X`` already, sends
        ``SELECT`` and ``TOKENS`` alone."""
        return loads.load_streams(self, X)

    # Results (:mod:`fabric.replies`) ------------------------------------------------------

    def read_streams(self):
        """``[{row: [wavelets]}]``: the READs of each owner core's ``Y``, one exchange per group
        of rows with distinct reply colors (:func:`~.replies.read_streams`)."""
        return replies.read_streams(self)

    def read_blocks(self, outlets):
        """The replies to :meth:`read_streams` as ``{(r, c): (slots, n_tok)}`` blocks
        (:func:`~.replies.read_blocks`)."""
        return replies.read_blocks(self, outlets)

    def decode_y(self, blocks):
        """``Y`` (``[n_out, tokens]`` int64) from the blocks (:func:`~.replies.decode_y`)."""
        return replies.decode_y(self, blocks)

    def decode_raw(self, outlets):
        """The raw totals ``[n_out, tokens]`` (int64) of a ``CR_OUT`` program, or the
        activations of a ``CR_ACT`` one, from the compute exchange's outlets
        (:func:`~.replies.decode_raw`)."""
        return replies.decode_raw(self, outlets)

    def read_groups(self):
        """The plan's READ groups cut to the rows that own results
        (:func:`~.replies.read_groups`)."""
        return replies.read_groups(self)

    # Figures ------------------------------------------------------------------------------------

    @property
    def stream_lengths(self):
        """Wavelets in each row's compute stream (weights and carriage returns)."""
        return np.array([len(self.streams[r]) for r in range(self.config.rows)])

    @property
    def density(self):
        """Nonzero weights over all weights."""
        return self.weights.values.size / (self.n_out * self.n_in)

    def useful_macs(self, X=None):
        """Nonzero weight x nonzero activation pairs (over the real tokens)."""
        X = self.check_x(X)
        per_input = np.bincount(self.weights.indices, minlength=self.n_in)
        return int(per_input @ np.count_nonzero(X, axis=1))

    def ideal_cycles(self, X=None):
        """:meth:`useful_macs` over the mesh's MACs (``rows * cols * lanes``), rounded up."""
        cfg = self.config
        return math.ceil(self.useful_macs(X) / (cfg.rows * cfg.cols * cfg.lanes))


# Compiler -----------------------------------------------------------------------------------------
