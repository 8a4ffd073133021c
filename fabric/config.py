"""The parameters of a mesh: its size, the cores' sizes and format, and the color plan they
imply."""

import dataclasses
import itertools
import math
import re
from dataclasses import dataclass, field, fields

from wse.rtl.core_params import CoreParams
from wse.rtl.crossbar import MUXES
from wse.rtl.isa import MAX_O
from wse.rtl.numfmt import BFloat16, FixedPoint, number_format
from wse.rtl.validate import count

from .routes import ColorPlan

__all__ = ["MeshConfig", "gemm_config", "parse_mesh", "train_config", "TrainSizing",
           "transposed_backward"]


def parse_mesh(text):
    """``"4x4"`` -> ``(4, 4)``; a clear ``ValueError`` for anything else."""
    match = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", str(text))
    if not match or int(match[1]) < 1 or int(match[2]) < 1:
        raise ValueError(f"mesh must be ROWSxCOLS with both at least 1 (such as 4x4), "
                         f"not {text!r}")
    return int(match[1]), int(match[2])


@dataclass(frozen=True)
class MeshConfig:
    """A ``rows x cols`` mesh of identical cores (``docs/mesh.md``).

    ``n_feat``, ``n_tok``, ``n_out``, ``lanes`` and ``fmt`` are each core's (``docs/pe.md``):
    a row holds up to ``n_feat`` input features and owns up to ``n_out`` output features, a
    column up to ``n_tok`` tokens. ``edges`` adds edge ports (``fabric.routes.ColorPlan``);
    ``depth`` is the router queues' depth, ``acc_buffers`` and ``psum_depth`` the cores'
    accumulator buffers and psum FIFO depth (timing only: results never depend on them; 8 and
    16 let a row run a few outputs ahead of its neighbours, ``docs/mesh.md``).
    ``counter_adders`` (1 or 2) is how the cores' counters are built: one 32-bit adder shared
    by the READ engine and the counters' updates, or one each (the same counts in the same
    cycles, on a shorter path: the iCEBreaker's choice, ``docs/fpga.md``).
    ``held_copies`` (1 or 2) is how many copies each core's command FIFO keeps of what its
    head holds in flip-flops (:class:`~rtl.peek_fifo.PeekFIFO`: the same cycles; 2 keeps
    synthesis from merging two reads into one slower one, the ULX3S's choice).
    ``tag_slots`` is the routers' (:class:`~rtl.router.Router`): with 2-deep queues, each queue
    slot's tags in a memory of its own (the same cycles; a shorter path where memories are LUT
    RAM, False on the iCEBreaker, whose are flip-flops).
    ``crossbar`` is how the routers' crossbars are built (:class:`~rtl.crossbar.Crossbar`
    ``mux``): ``"and_or"``, or ``"binary"`` (each 4:1 multiplexer a tree of 2:1 ones, which the
    ECP5 builds map to two LUT4s and the slice's ``PFUMX`` a bit instead of three LUT4s; the
    same cycles; the ULX3S's choice, ``docs/fpga.md``).
    ``reply_colors`` is the color plan's (``None``: as many as fit, ``min(rows, 18)``; fewer
    make rows share them on a small mesh as they do on a large one).
    """
    rows: int = 4
    cols: int = 4
    n_feat: int = 32
    n_tok: int = 8
    n_out: int = 32
    lanes: int = 1
    fmt: FixedPoint | BFloat16 = field(default_factory=FixedPoint)
    edges: str = ""
    depth: int = 4
    acc_buffers: int = 8
    psum_depth: int = 16
    counter_adders: int = 1
    held_copies: int = 1
    tag_slots: bool = True
    crossbar: str = "and_or"
    reply_colors: int | None = None

    def __post_init__(self):
        object.__setattr__(self, "fmt", number_format(self.fmt))
        for name in ("rows", "cols", "depth", "acc_buffers", "psum_depth"):
            object.__setattr__(self, name, count(name, getattr(self, name)))
        for name in ("counter_adders", "held_copies"):
            value = getattr(self, name)
            if type(value) is not int or value not in (1, 2):
                raise ValueError(f"{name} must be 1 or 2, not {value!r}")
        if type(self.tag_slots) is not bool:
            raise ValueError(f"tag_slots must be True or False, not {self.tag_slots!r}")
        if self.crossbar not in MUXES:
            raise ValueError(f"crossbar must be one of {', '.join(MUXES)}, "
                             f"not {self.crossbar!r}")
        object.__setattr__(self, "plan", ColorPlan(self.rows, self.cols, edges=self.edges,
                                                   reply_colors=self.reply_colors))
        self.core(0, 0)      # validates the core parameters

    @property
    def shape(self):
        return self.rows, self.cols

    @property
    def tiles(self):
        """``(r, c)`` of every tile, row by row."""
        return [(r, c) for r in range(self.rows) for c in range(self.cols)]

    @property
    def max_tokens(self):
        """Tokens the mesh holds: ``cols * n_tok``."""
        return self.cols * self.n_tok

    def core(self, r, c):
        """The :class:`~rtl.core_params.CoreParams` of core ``(r, c)``."""
        return CoreParams(n_feat=self.n_feat, n_tok=self.n_tok, n_out=self.n_out,
                          lanes=self.lanes, fmt=self.fmt, row=r, rows=self.rows,
                          col=self.plan.core_col(r, c), cols=self.cols,
                          colors=self.plan.core_colors(r, c))

    @property
    def sram_bytes(self):
        """Bytes of memory in the whole mesh's cores: ``X`` and its zero mask, the accumulator
        buffers, ``Y`` (``docs/pe.md``)."""
        fmt, t = self.fmt, self.n_tok
        per_core = (self.n_feat * t * fmt.width + self.n_feat * t
                    + self.acc_buffers * t * fmt.acc_width + self.n_out * t * fmt.width) // 8
        return self.rows * self.cols * per_core

    def to_dict(self):
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "fmt"}
        d["fmt"] = self.fmt.to_dict()
        return d

    @classmethod
    def from_dict(cls, d):
        """From :meth:`to_dict`'s form; unknown keys are ignored."""
        d = dict(d)
        d["fmt"] = number_format(d.get("fmt", {}))
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def __str__(self):
        return (f"{self.rows}x{self.cols} mesh of cores with {self.n_feat} features, "
                f"{self.n_tok} tokens, {self.n_out} outputs, {self.lanes} lane(s)")


def gemm_config(mesh, out_features, in_features, tokens, *, raw=False, **overrides):
    """The smallest :class:`MeshConfig` of ``mesh`` (``(rows, cols)``) at least
    as large as the default (or ``overrides``) that holds an ``out_features x in_features`` GEMM
    on ``tokens`` tokens: ``n_feat`` and ``n_out`` (not needed with ``raw``) grow to a row's
    share of the features, ``n_tok`` to the next power of two of a column's share of the tokens.

    ``ValueError`` (from :class:`~rtl.core_params.CoreParams`) when a core cannot be that large.
    """
    rows, cols = mesh
    base = MeshConfig(rows, cols, **overrides)
    n_tok = 1 << (math.ceil(tokens / cols) - 1).bit_length()
    return dataclasses.replace(
        base,
        n_feat=max(base.n_feat, math.ceil(in_features / rows)),
        n_out=base.n_out if raw else max(base.n_out, math.ceil(out_features / rows)),
        n_tok=max(base.n_tok, n_tok))


@dataclass(frozen=True)
class TrainSizing:
    """What :func:`train_config` chose: the ``config``; for each layer that its cores cannot
    hold whole, why (``blocked``: layer name -> a sentence), empty when every layer's forward
    and delta pass runs as one GEMM; and where the activations stay in the cores' ``X``
    (``layout``: ``inputs``, for each layer the first slot its inputs occupy, a region each
    but for layer 2's, which go over the batch;
    ``deltas``, the first slot of the loss's deltas; ``gradient``, of the weight-gradient
    pass's features; with ``transposed``, the backward pass runs transposed and ``weights``
    replaces ``deltas``: the first slot of the ``W`` each delta pass loads. Empty, with
    ``why_not`` saying why, when they cannot stay and every layer loads its input and reads
    its output back: ``docs/mesh.md``, "Resident layers")."""
    config: MeshConfig
    blocked: dict
    layout: dict = field(default_factory=dict)
    why_not: str = ""


def train_config(mesh, widths, shard, *, names=None, **overrides):
    """The :class:`MeshConfig` of ``mesh`` (``(rows, cols)``) whose cores hold the complete
    layers of a network of ``widths`` (``(n_in, hidden..., n_out)``) for a batch shard of
    ``shard`` tokens, at least as large as the default (or ``overrides``): ``n_feat`` and
    ``n_out`` a row's share of the widest layer in either direction (the forward pass's inputs
    and outputs are the delta pass's outputs and inputs) and of the shard (the weight-gradient
    pass's features are the tokens), ``n_tok`` the next power of two of a column's share of
    the widest layer's inputs (the weight-gradient pass's tokens: one block, so its deltas
    stream once) and of the shard. ``X`` holds the activations of every layer at once (a
    region for each layer's inputs, layer 2's over the batch: :func:`_regions`), then the
    loss's deltas (or, where the backward pass loads fewer words transposed, each layer's
    ``W``: :func:`transposed_backward`) and the weight-gradient pass's features
    (:attr:`TrainSizing.layout`); where
    that takes more than
    the cores' memory holds at those tokens, the weight-gradient pass's tokens are halved
    until it fits (that pass then runs in blocks). Where the cores' memory cannot hold that
    much (``n_feat * n_tok <= 0x8000``, ``n_out * n_tok <= 0x7F00``, ``docs/pe.md``),
    ``n_feat`` and ``n_out`` are cut to what fits, the activations go through the edges
    between layers, and the layers wider than that run in blocks (:mod:`fabric.tiling`):
    :class:`TrainSizing` says which.

    ``ValueError`` naming the limit and the numbers, before anything runs, when a layer cannot
    run even in blocks: the shard's tokens do not fit a column (4096 tokens a core), or a layer
    has more outputs, in either direction, than a carriage return can name."""
    rows, cols = mesh
    widths = [count("width", w) for w in widths]
    shard = count("shard", shard)
    names = names or [f"fc{j}" for j in range(len(widths) - 1)]
    for name, n_in, n_o in zip(names, widths, widths[1:]):
        if max(n_in, n_o) > MAX_O + 1:
            raise ValueError(f"layer {name} ({n_in} inputs, {n_o} outputs) cannot run on the mesh "
                             f"even in blocks: a carriage return names at most {MAX_O + 1} "
                             f"outputs")
    base = MeshConfig(rows, cols, **overrides)
    n_tok = max(base.n_tok, _pow2(math.ceil(shard / cols)))
    if n_tok > _MAX_DIM:
        raise ValueError(f"a batch shard of {shard} tokens does not fit the {rows}x{cols} mesh: "
                         f"its {cols} columns hold at most {cols * _MAX_DIM} tokens "
                         f"({_MAX_DIM} a core); use more systems or a smaller batch")
    widest = math.ceil(max(*widths, shard) / rows)    # the gradient pass's features: tokens
    # the gradient pass's tokens are a layer's inputs: all of them in one block where the
    # memory allows (the other passes run on their real tokens alone: TOKENS)
    # the activations stay in X (a region for each layer's inputs), then the loss's deltas and
    # the gradient pass's features (the shard's tokens)
    inputs, regions = _regions([math.ceil(w / rows) for w in widths[:-1]])
    n_tok_grad = _pow2(math.ceil(max(widths[:-1]) / cols))
    transposed = transposed_backward(widths, shard, cols * max(n_tok, n_tok_grad))
    # the loss's deltas (or, transposed, each layer's W), then the gradient pass's features
    regions += [math.ceil(max(widths[2:] if transposed else widths[-1:]) / rows),
                math.ceil(shard / rows)]
    while n_tok_grad > n_tok and (min(widest, _MAX_DIM) * n_tok_grad > _Y_WORDS
                                  or n_tok_grad > _MAX_DIM
                                  or sum(regions) * n_tok_grad > _X_WORDS):
        n_tok_grad //= 2
    n_tok = max(n_tok, n_tok_grad)
    n_feat = min(max(base.n_feat, widest, sum(regions)), _MAX_DIM, _X_WORDS // n_tok)
    if transposed and (max(widths[1:]) > cols * n_tok or sum(regions) > n_feat):
        # halved to fit, a W no longer fits a row; or the Ws' region leaves no room for the
        # activations: the usual backward pass
        transposed = False
        regions[-2] = math.ceil(widths[-1] / rows)
        n_feat = min(max(base.n_feat, widest, sum(regions)), _MAX_DIM, _X_WORDS // n_tok)
    n_out = min(max(base.n_out, widest), _MAX_DIM, _Y_WORDS // n_tok)
    blocked = {}
    for name, n_in, n_o in zip(names, widths, widths[1:]):
        over = [f"{width} {what} > {rows} rows x {held}" for what, width, held in (
            ("inputs", n_in, n_feat), ("outputs", n_o, n_out))
            if width > rows * held]
        if over or max(n_in, n_o) > rows * min(n_feat, n_out):
            blocked[name] = (f"{name} runs in blocks: {', '.join(over) or 'its delta pass'} "
                             f"(a core holds {n_feat} features and {n_out} outputs of "
                             f"{n_tok} tokens)")
    config = dataclasses.replace(base, n_feat=n_feat, n_out=n_out, n_tok=n_tok)
    why_not = ""
    if sum(regions) > n_feat:
        why_not = (f"the activations of every layer, the loss's deltas and the gradient "
                   f"pass's features need {sum(regions)} slots a core "
                   f"({' + '.join(map(str, regions))}), its X holds {n_feat} of {n_tok} tokens")
    elif blocked:
        why_not = "a layer runs in blocks"
    elif config.plan.raw_rows() != list(range(rows)):
        why_not = (f"the {rows} rows share {config.plan.reply_colors} reply colors, and a "
                   f"resident layer's owners all send their activations at once")
    first = [0, *itertools.accumulate(regions)]
    layout = {} if why_not else {"inputs": [first[k] for k in inputs],
                                 "weights" if transposed else "deltas": first[-3],
                                 "gradient": first[-2]}
    if layout and transposed:
        layout["transposed"] = True
    return TrainSizing(config, blocked, layout, why_not)


def transposed_backward(widths, shard, tokens):
    """Whether the backward pass loads fewer words transposed (``docs/mesh.md``, "The
    transposed backward pass"): each layer above the first loads its ``W`` for the delta pass
    (``dZ^T = dY^T @ W``) and the top layer ``dY^T``, where the usual one loads the loss's
    deltas and, for each layer's gradient pass, the smaller of ``A^T`` and ``dY^T``
    (:func:`~fabric.gradient.gradient_gemm`); and whether each layer's outputs and every
    layer's inputs but the batch's fit a row's ``tokens`` (a ``W`` and a ``dZ^T`` as ``X``)."""
    layers = list(zip(widths, widths[1:]))
    if len(layers) < 2 or max(widths[1:]) > tokens:
        return False
    transposed = shard * widths[-1] + sum(n_in * n_out for n_in, n_out in layers[1:])
    usual = shard * widths[-1] + sum(shard * min(n_in, n_out) for n_in, n_out in layers)
    return transposed < usual


def _regions(slots):
    """``(region of each layer's inputs, slots of each region)`` for layers whose inputs take
    ``slots[j]`` slots a row. A layer reads its inputs while it writes the next layer's, and
    a delta pass reads the deltas the one above wrote over that layer's inputs while it writes
    its own over its layer's, so each pass reads one region and writes another: each layer's
    inputs have a region of their own, except that layer 2's go over the batch (layer 0's,
    which nothing reads again)."""
    inputs, regions = [], []
    for j, n in enumerate(slots):
        if j == 2:
            inputs.append(0)
            regions[0] = max(regions[0], n)
        else:
            inputs.append(len(regions))
            regions.append(n)
    return inputs, regions


def _pow2(n):
    """The smallest power of two at least ``n`` (1 for ``n <= 1``)."""
    return 1 << (max(1, n) - 1).bit_length()


#: A core's largest dimension, and the words its X and Y regions hold (``docs/pe.md``).
_MAX_DIM, _X_WORDS, _Y_WORDS = 4096, 0x8000, 0x7F00
