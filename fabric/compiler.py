"""The GEMM compiler: ``Y = W @ X`` laid out on a mesh as a :class:`~.program.GemmProgram`.

:func:`compile_gemm` takes a dense ``W`` (or compressed rows), :func:`compile_gemm_csr` the
compressed rows themselves; both give the same program (``docs/mesh.md``: the placement of
features on rows, tokens on columns, the weight streams grouped by output feature).
"""

import numpy as np

from wse.rtl import isa
from wse.rtl.validate import count

from .config import MeshConfig
from .numerics import operands
from .placement import Placement
from .program import GemmProgram
from .spans import has_weights
from .tiling import SparseRows

__all__ = ["compile_gemm", "compile_gemm_csr", "SPANS_ABOVE"]

#: The share of (output, row) pairs without a weight from which a program reduces each output
#: only in the rows it needs (``spans``). Below it nearly every row takes part in every output
#: anyway and the spanning owners cost more hand-offs than they save: on a 4x4 mesh a 64x64x32
#: GEMM at 90 % sparsity (18 % of the pairs empty) takes 924 cycles with spans and 901 without,
#: at 95 % (44 %) 561 against 600, a 256x256x32 at 99 % (85 %) 1675 against 2112.
SPANS_ABOVE = 0.25


def compile_gemm(config, W, X=None, *, n_tokens=None, in_placement=None, out_placement=None,
                 balance=True, raw=False, zeros=False, mask=None, spans=None, act=False,
                 bias=None, load=True, keep=None, order=None):
    """Lay ``Y = W @ X`` out on the mesh of ``config`` (``docs/mesh.md``).

    Parameters
    ----------
    config : MeshConfig
    W : (n_out, n_in) integers in the format's operand range, or a :class:`SparseRows`
        (then compiled as by :func:`compile_gemm_csr`, never made dense).
    X : (n_in, tokens) integers in the operand range, optional (the streams do not depend on
        it; :meth:`GemmProgram.load_streams` and the figures use it by default).
    n_tokens : int, optional
        Tokens when ``X`` is not given (``cols * n_tok`` by default); must match ``X``.
    in_placement : Placement, optional
        Rows and slots of the input features; :meth:`Placement.balanced` (or, with
        ``balance=False``, :meth:`Placement.modulo`) by default.
    out_placement : Placement, optional
        Owner rows and result slots of the outputs; by default :meth:`Placement.spanning`
        (each output owned inside the span of the rows holding its weights), or with
        ``spans=False`` :meth:`Placement.modulo` (for ``raw``, either over
        ``config.plan.raw_rows()``: every row unless the mesh has more rows than reply
        colors). With ``raw``, the rows owning outputs must have pairwise distinct reply
        colors.
    raw : bool
        ``CR_OUT``: the owner rows send their 32-bit totals out instead of requantising them
        into ``Y`` (no ``n_out`` limit).
    act : bool
        ``CR_ACT``: the owner rows write ``relu`` of the requantised results into ``X`` at
        ``out_placement``'s slots (which must lie below ``n_feat`` and apart from the inputs'
        slots of the same row) and send them out during the compute phase: the layer's output
        stays on the mesh as the next layer's input (``docs/mesh.md``, "Resident layers").
        Its owners need distinct reply colors, as ``raw``'s do.
    keep : (n_out, tokens) bools, optional
        ``CR_DELTA``: as ``act`` without the ReLU, each result kept where ``keep`` is set and 0
        where it is clear (the delta pass: the ReLU's derivative). The owner row's MASKs gate
        each output's AXPYs by ``keep`` (its tokens outside cost no MAC), and its engine writes
        every active token of the output's slot. Not with ``mask``.
    bias : (n_out,) operands, optional
        Added to each output's total before it is requantised: a weight on the ones slot
        (:data:`~rtl.isa.ONES_SLOT`) streamed into the owner row after its weights (not
        streamed where 0). Not with ``mask``.
    load : bool
        ``False``: ``X`` is in the cores already, at ``in_placement`` (a resident layer: an
        earlier ``act`` program wrote it); :meth:`GemmProgram.load_streams` is then empty and
        ``X`` serves the reference and the figures only.
    zeros : bool
        Stream zero weights too (to measure what sparse streaming saves).
    mask : (n_out, tokens) bools, optional
        A masked GEMM: ``Y[o, t]`` only where ``mask[o, t]``, 0 elsewhere, with no MAC and no
        cycle spent on the rest (``docs/mesh.md``, "Masked GEMMs": the weight-gradient pass).
    spans : bool or None
        Each row takes part only in the reductions of the outputs it holds weights of, or
        passes on (:meth:`GemmProgram.cr_flags`; ``docs/mesh.md``, "Partial sums");
        ``False`` streams plain CRs to every row, every row reducing every output. ``None``
        (the default): spans when at least :data:`SPANS_ABOVE` of the (output, row) pairs have
        no weight, where they save more engine cycles than their reordering costs.
    order : sequence of int, optional
        The outputs in stream order, each once (a permutation of ``range(n_out)``); by
        default :func:`~.spans.stream_order`. Any order computes the same results; it moves
        cycles only (:func:`~.tuning.tune_gemm` picks one by the cycle model).

    Returns
    -------
    GemmProgram

    Raises
    ------
    ValueError
        Naming the limit when a shape does not fit (``n_feat``, ``n_out``, ``n_tok * cols``,
        the operand range) or an argument is malformed.
    """
    if not isinstance(config, MeshConfig):
        raise ValueError(f"config must be a MeshConfig, not {config!r}")
    if isinstance(W, SparseRows):
        return compile_gemm_csr(config, W.shape, W.indptr, W.indices, W.values, X,
                                n_tokens=n_tokens, in_placement=in_placement,
                                out_placement=out_placement, balance=balance, raw=raw,
                                zeros=zeros, mask=mask, spans=spans, act=act, bias=bias,
                                load=load, keep=keep, order=order)
    W = operands(config.fmt, W, "W")
    if not W.shape[0] or not W.shape[1]:
        raise ValueError(f"W must have at least one output and one input feature, not shape "
                         f"{W.shape}")
    return _compile(config, SparseRows.from_dense(W), W, X, n_tokens=n_tokens,
                    in_placement=in_placement, out_placement=out_placement, balance=balance,
                    raw=raw, zeros=zeros, mask=mask, spans=spans, act=act, bias=bias, load=load,
                    keep=keep, order=order)


def compile_gemm_csr(config, shape, indptr, indices, values, X=None, **options):
    """:func:`compile_gemm` (the same program, ``options`` its keyword arguments) of the ``W``
    of ``shape`` ``(n_out, n_in)`` given by compressed rows, never built: output ``o``'s weights
    are ``values[indptr[o]:indptr[o + 1]]`` at the input features ``indices[...]`` (ascending).
    Zero values are not streamed (as a dense ``W``'s zeros are not) unless ``zeros=True``.
    ``ValueError`` as :func:`compile_gemm`, and for malformed compressed rows.
    """
    if not isinstance(config, MeshConfig):
        raise ValueError(f"config must be a MeshConfig, not {config!r}")
    if not isinstance(shape, (tuple, list)) or len(shape) != 2:
        raise ValueError(f"shape must be a pair (n_out, n_in), not {shape!r}")
    weights = SparseRows.checked(shape, indptr, indices,
                                 operands(config.fmt, values, "values", ndim=1))
    return _compile(config, weights.nonzero(), None, X, **options)


def _compile(config, weights, W, X, *, n_tokens=None, in_placement=None, out_placement=None,
             balance=True, raw=False, zeros=False, mask=None, spans=None, act=False, bias=None,
             load=True, keep=None, order=None):
    """The program of the nonzero ``weights`` (``W``: the same as a dense matrix, or ``None``)."""
    fmt = config.fmt
    n_out, n_in = weights.shape
    if raw + bool(act) + (keep is not None) > 1:
        raise ValueError("results are at most one of raw (CR_OUT), act (CR_ACT) and keep "
                         "(CR_DELTA)")
    if bias is not None:
        if mask is not None:
            raise ValueError("a masked GEMM takes no bias")
        bias = operands(fmt, bias, "bias", ndim=1)
        if bias.shape != (n_out,):
            raise ValueError(f"bias must have shape (n_out,) = ({n_out},), not {bias.shape}")
    if X is not None:
        X = operands(fmt, X, "X")
        if X.shape[0] != n_in:
            raise ValueError(f"X must have n_in = {n_in} rows (W is {n_out}x{n_in}), not "
                             f"{X.shape[0]}")
        if n_tokens is not None and n_tokens != X.shape[1]:
            raise ValueError(f"n_tokens={n_tokens!r} but X has {X.shape[1]} tokens")
        tokens = X.shape[1]
    elif n_tokens is not None:
        tokens = count("n_tokens", n_tokens)
    else:
        tokens = config.max_tokens
    if tokens == 0:
        raise ValueError("X has 0 tokens (columns): a GEMM needs at least one token")
    if not 1 <= tokens <= config.max_tokens:
        raise ValueError(f"tokens: {tokens} do not fit the mesh, which holds n_tok * cols = "
                         f"{config.n_tok} * {config.cols} = {config.max_tokens}")
    if in_placement is None:
        in_placement = (Placement.balanced_counts(np.bincount(weights.indices, minlength=n_in),
                                                  config.rows) if balance
                        else Placement.modulo(n_in, config.rows))
    _check_placement("in_placement", in_placement, config.rows, n_in, "inputs")
    if mask is not None:
        mask = _checked_mask(config, mask, n_out, tokens)
    if keep is not None:
        if mask is not None:
            raise ValueError("a CR_DELTA program (keep) is gated by keep: it takes no mask")
        keep = _checked_mask(config, keep, n_out, tokens, "keep")
    writes = act or keep is not None        # results written into X
    has = has_weights(config.rows, n_out, weights, in_placement.row_of, zeros=zeros,
                      streamed=None if mask is None else mask.any(axis=1))
    spans = bool(1 - has.mean() >= SPANS_ABOVE) if spans is None else bool(spans)
    streamed = raw or writes        # results leave while the compute phase runs
    if out_placement is None:
        # owners of results that leave during the compute phase need distinct reply colors
        among = config.plan.raw_rows() if streamed and config.plan.raw_rows() != list(
            range(config.rows)) else None
        limit = None if raw else config.n_feat if writes else config.n_out
        if spans:
            out_placement = Placement.spanning(has, config.rows, among=among, limit=limit)
        else:
            out_placement = Placement.modulo(n_out, config.rows, among=among)
    _check_placement("out_placement", out_placement, config.rows, n_out, "outputs")
    in_placement.check_fits(config.n_feat, "input features", name="n_feat")
    if writes:
        out_placement.check_fits(config.n_feat, "output features written into X",
                                 name="n_feat")
        _check_apart(config, in_placement, out_placement)
    elif not raw:
        out_placement.check_fits(config.n_out, "output features", name="n_out")
    if streamed:
        _check_raw_owners(config, out_placement)
    big = int(out_placement.slot_of.max()) * config.rows + config.rows - 1
    if big > isa.MAX_O:
        raise ValueError(f"output features: a carriage return argument of {big} (slot * rows + "
                         f"row) does not fit its {isa.CR_O_BITS} bits")
    if order is not None:
        order = _checked_order(order, n_out)
    if not load and X is None:
        raise ValueError("a resident layer (load=False) needs the X the cores hold, for the "
                         "reference and the figures")
    return GemmProgram(config, weights, X, tokens, in_placement, out_placement, bool(raw),
                       bool(zeros), W=W, mask=mask, spans=spans, act=bool(act), bias=bias,
                       load=bool(load), keep=keep, order=order)


def _check_apart(config, in_placement, out_placement):
    """A ``CR_ACT`` program writes its outputs into ``X`` while its weights still read the
    inputs: ``ValueError`` if a row's output slot is one of its input slots."""
    for r in range(config.rows):
        both = np.intersect1d(in_placement.slot_of[in_placement.row_of == r],
                              out_placement.slot_of[out_placement.row_of == r])
        if both.size:
            raise ValueError(f"output features written into X would overwrite inputs: row {r} "
                             f"holds input and output features at slot {int(both[0])} (give "
                             f"an out_placement whose slots lie apart from in_placement's)")


def _checked_order(order, n_out):
    """``order`` as an ``int64`` array; ``ValueError`` unless it names every output once."""
    try:
        a = np.asarray(order)
    except (TypeError, ValueError):
        a = None
    if a is None or a.ndim != 1 or (a.size and not np.issubdtype(a.dtype, np.integer)):
        raise ValueError(f"order must be a sequence of output indices, not {order!r}")
    a = a.astype(np.int64)
    if a.size != n_out or not np.array_equal(np.sort(a), np.arange(n_out)):
        raise ValueError(f"order must name each of the {n_out} outputs once (a permutation of "
                         f"0..{n_out - 1}), not {a.size} indices"
                         + ("" if a.size != n_out else " with repeats or outside that range"))
    return a


def _check_placement(name, placement, rows, n, what):
    if not isinstance(placement, Placement):
        raise ValueError(f"{name} must be a Placement, not {placement!r}")
    placement.check_shape(name, rows, n, what)


def _checked_mask(config, mask, n_out, tokens, name="mask"):
    """``mask`` as an ``(n_out, tokens)`` bool array; ``ValueError`` naming the problem (the
    shape, a value that is not 0/1, cores with more tokens than MASKs can gate)."""
    a = np.asarray(mask)
    if a.shape != (n_out, tokens):
        raise ValueError(f"{name} must have shape (n_out, tokens) = ({n_out}, {tokens}), not "
                         f"{a.shape}")
    if a.dtype != bool:
        if not np.issubdtype(a.dtype, np.integer) or ((a != 0) & (a != 1)).any():
            raise ValueError(f"{name} must hold booleans (or 0 and 1)")
        a = a != 0
    if name != "mask":
        return a
    # a MASK's col field names every column a mesh can have (fabric.routes.MAX_COLS)
    chunks = -(-config.n_tok // isa.MASK_CHUNK)
    if chunks > isa.MASK_MAX_CHUNKS:
        raise ValueError(f"a masked GEMM needs n_tok <= {isa.MASK_MAX_CHUNKS * isa.MASK_CHUNK} "
                         f"(a MASK's chunk field), not {config.n_tok}")
    return a


def _check_raw_owners(config, placement):
    """Raw results leave while the compute phase runs, all rows at once: ``ValueError`` unless
    the rows owning outputs have pairwise distinct reply colors."""
    plan, seen = config.plan, {}
    for r in np.unique(placement.row_of).tolist():
        other = seen.setdefault(plan.out(r), r)
        if other != r:
            raise ValueError(f"output features: rows {other} and {r} both own raw results but "
                             f"share reply color {plan.out(r)} (a {config.rows}-row mesh has "
                             f"{plan.reply_colors} reply colors): place raw outputs on rows "
                             f"with distinct reply colors, such as plan.raw_rows() "
                             f"{plan.raw_rows()}")
