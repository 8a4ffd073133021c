"""One system in the swarm: a mesh (a :class:`~runtime.system.System`) and its shard's activations.

SwarmX's transports deliver byte messages (:mod:`host.messages`) to :meth:`MeshWorker.handle`;
every backend (in-process, a local process, a Ray actor) runs this same class, so they compute
the same bits. The activations and deltas stay in the mesh's cores between GEMMs where the
trainer's layout allows (``layout``, :class:`~fabric.config.TrainSizing`; ``docs/mesh.md``,
"Resident layers"), and a copy of each, as it leaves the mesh, stays here for the
weight-gradient pass; only logits go up to the host, and only reduced gradients leave for
MemoryX.

Passes, for layer ``l`` with quantised weights ``W`` (a :class:`~host.layer_stream.LayerStream`)
and all values in the datapath format (:mod:`host.numbers`; bf16: bit patterns):

- **forward**: ``A' = relu(requantise(W @ A + b))`` on the mesh, written into the cores where
  the next layer reads it (:meth:`MeshWorker.resident_layer`); the last layer's totals come
  back raw and are requantised into the logits, which go to the host. Without a layout,
  ``Z = W @ A`` on the mesh (:func:`fabric.tiling.run_tiled`), then here ``Y = sat(Z + b)``
  (bf16: ``bf(fl(Z + b))``; a value made infinite there counts as the pass's overflow) and
  ``A' = relu(Y)``;
- **backward**: the weight-gradient pass ``dW[o, i] = sum_t dY[o, t] A[i, t]`` for the mask's
  indices on the mesh, as the masked GEMM ``dY @ A^T`` or ``A @ dY^T``
  (:func:`fabric.gradient.gradient_gemm`: the nonzero deltas or activations stream, the mask
  gates the MACs, the 32-bit totals stream out raw), and ``db = sum_t dY`` here, exactly; then,
  below the first layer, the delta pass ``dA = W^T @ dY`` on the mesh, masked by the ReLU of
  the layer below (with a layout, on the mesh: written over the layer's activations by
  CR_DELTA, :meth:`MeshWorker.resident_delta`, the gradient pass's ``A^T`` going into the
  slots above them; with a transposed layout, ``dZ^T = dY^T @ W`` with ``W`` loaded, written
  where the gradient pass of the layer below reads it, :meth:`MeshWorker.transposed_delta`).
  Gradients leave as SwarmX adds them (:func:`~host.numbers.gradient_sum`: ``int64``, or in
  bf16 the binary32 totals as exact sums; a total that is not finite is an error naming the
  layer).

The weights stay compressed rows from the stream to the tiles: the tiles are cut from them
(:class:`fabric.tiling.SparseRows`) and the delta pass's ``W^T`` is their transpose, with no
dense layer in between (a transposed delta pass loads ``W`` into the cores, dense: its zeros
cost no MAC there); :meth:`System.gemm <runtime.system.System.gemm>` takes each tile as
compressed rows and compiles it from them. The System reads no counters
(``counters=False``): training needs only ``Y``, the cycles and the sticky error and overflow
flags.

Mesh cycles are the RTL's where it runs, else the cycle model's (:mod:`fabric.cycle_model`),
per pass (``forward``, ``delta``, ``gradient``); the dense equivalent is the cycle model's for
the same GEMM with every weight present (:func:`fabric.cycle_model.predict_dense_cycles`, from
the same program, not a second compile), and for the gradient pass the same deltas without the
mask (:func:`fabric.cycle_model.predict_unmasked_cycles`: a dense layer's gradient). With
``check_golden``, every mesh result of every pass is compared with
:func:`fabric.reference.gemm_reference`; results that differ are counted (``mismatches``).
"""

import functools
from dataclasses import dataclass

import numpy as np

from wse.fabric import numerics
from wse.fabric.compiler import compile_gemm
from wse.fabric.config import MeshConfig
from wse.fabric.cycle_model import (
    predict_cycles,
    predict_dense_cycles,
    predict_io_cycles,
    predict_unmasked_cycles,
)
from wse.fabric.gradient import gradient_gemm, gradient_macs
from wse.fabric.placement import Placement
from wse.fabric.reference import gemm_reference
from wse.fabric.tiling import SparseRows, run_tiled

from .layer_stream import LayerStream
from .messages import decode, encode
from .numbers import add_bias, canonical_zero, delta_sum, gradient_sum, positive

__all__ = ["MeshWorker", "PassFigures"]


@dataclass
class PassFigures:
    """What one pass of one layer cost on one system: ``compute_cycles`` (of its compute
    phases), ``io_cycles`` (of its edge transfers: activations loaded through the intakes,
    results read out of the outlets), ``dense_compute`` (the compute phases of the same GEMM
    with every weight present, or for the gradient pass without the mask: the cycle model's),
    ``useful_macs`` and ``dense_macs`` (nonzero-by-nonzero products of the sparse and of the
    dense GEMM) and ``blocks`` (GEMMs it was cut into, :func:`~fabric.tiling.run_tiled`).

    The dense GEMM moves exactly the words the sparse one moves (the same activations into
    the same number of slots per row, the same results out), so its edge transfers are the
    sparse run's: ``dense_cycles`` is ``dense_compute + io_cycles``."""
    compute_cycles: int = 0
    io_cycles: int = 0
    dense_compute: int = 0
    useful_macs: int = 0
    dense_macs: int = 0
    blocks: int = 0

    #: The reply's figures, each a table by pass.
    REPLY = ("cycles", "io_cycles", "compute_cycles", "dense_cycles", "useful_macs",
             "dense_macs", "blocks")

    @property
    def cycles(self):
        return self.compute_cycles + self.io_cycles

    @property
    def dense_cycles(self):
        return self.dense_compute + self.io_cycles

    def count_macs(self, W, X):
        """The useful MACs of ``W @ X`` (``W``: :class:`~fabric.tiling.SparseRows`), and of
        the same GEMM with every weight of ``W`` nonzero."""
        per_input = np.count_nonzero(X, axis=1)
        self.useful_macs = int(np.bincount(W.indices, minlength=W.shape[1]) @ per_input)
        self.dense_macs = int(per_input.sum()) * W.shape[0]


class MeshWorker:
    """A system: ``config`` (a :class:`MeshConfig` or its dict), a ``backend`` of
    :func:`runtime.open_system`, and whether to check every result against golden."""

    def __init__(self, config, backend="golden", *, check_golden=False, index=0):
        from wse.runtime import open_system

        self.config = config if isinstance(config, MeshConfig) else MeshConfig.from_dict(config)
        self.backend = backend
        self.index = index
        self.check_golden = bool(check_golden) and backend != "golden"
        kwargs = {"fast": True} if backend == "golden" else {}
        self.system = open_system(backend, self.config, **kwargs)
        self.inputs = {}        # layer -> its input activations A (int64 [n_in, T])
        self.active = {}        # layer -> where its output passed the ReLU
        self.delta = None       # dY of the next layer down, from the last delta pass
        self._next_input = None  # the last forward pass's output activations
        self.checks = 0         # mesh results compared with the golden model
        self.mismatches = 0     # numbers that differed since the last reply

    # -- transport ----------------------------------------------------------------------------

    def handle(self, data):
        """One request (bytes) -> its reply (bytes); errors come back as ``{"error": text}``."""
        message = decode(data)
        op = message.pop("op")
        try:
            reply = getattr(self, f"op_{op}")(**message)
        except Exception as error:          # the transport reports it, naming this system
            reply = {"error": f"{type(error).__name__}: {error}"}
        return encode(reply)

    # -- the mesh -----------------------------------------------------------------------------

    def gemm(self, W, X, model=True, *, mask=None, totals=False, first=0, resident=False):
        """``W @ X`` on the mesh, tiled (``W``: :class:`~fabric.tiling.SparseRows`);
        ``(Y, figures, overflow)`` with ``figures`` a :class:`PassFigures` of the GEMM (without
        ``model``, cycles the mesh did not measure are 0 instead of modelled, and there is no
        dense figure). ``mask``: a masked GEMM. ``totals``: the exact ``int64`` sums of the raw
        32-bit totals (:func:`~fabric.tiling.run_tiled`), and as the dense figure the cycles
        without the mask (the gradient pass). ``first``: the cores' first slot for ``X``
        (the slots below it hold resident activations). ``resident``: ``X`` is in the cores
        already, feature ``i`` in row ``i % rows`` from slot ``first`` (a transposed delta
        pass wrote it there), and the GEMM is one block."""
        fmt = self.config.fmt
        figures = PassFigures()
        dense_model = predict_unmasked_cycles if totals else predict_dense_cycles

        def block(Wb, Xb, raw, **masked):
            placement = None
            if resident:
                if figures.blocks:
                    raise ValueError("a GEMM on a resident X runs in one block")
                placement = _region(self.config.rows, Wb.shape[1], first)
            elif first:
                p = Placement.balanced_counts(np.bincount(Wb.indices, minlength=Wb.shape[1]),
                                              self.config.rows)
                placement = Placement(p.rows, p.row_of, p.slot_of + first, kind=p.kind)
            program = compile_gemm(self.config, Wb, Xb, raw=raw, in_placement=placement,
                                   load=not resident, **masked)
            return self._run(program, figures, model, dense_model)

        if not fmt.is_float:
            X = np.clip(X, fmt.operand_min, fmt.operand_max)
        tiled = run_tiled(self.config, W, X, block, mask=mask, totals=totals)
        return tiled.y, figures, tiled.overflow

    def _run(self, program, figures, model=True, dense_model=predict_dense_cycles, dense_x=None):
        """Run ``program`` on the mesh, compare it with golden (``check_golden``) and add its
        cycles to ``figures`` (measured, or modelled with ``model``; the dense figure of
        ``dense_x`` where the layer's weights are in ``X``); its result."""
        X = program.X
        result = self.system.gemm(program, counters=False)
        if self.check_golden:
            Y, totals = gemm_reference(self.config, program, X)
            want = totals if program.raw else Y
            self.checks += 1
            self.mismatches += int(np.count_nonzero(np.asarray(result.y) != want))
        figures.blocks += 1
        if result.cycles is not None:
            figures.compute_cycles += result.cycles
            figures.io_cycles += result.load_cycles + result.read_cycles
        elif model:
            figures.compute_cycles += predict_cycles(program, X)
            figures.io_cycles += predict_io_cycles(program, X)
        if model:
            figures.dense_compute += dense_model(program, X if dense_x is None else dense_x)
        return result

    def resident_layer(self, layer, weights, bias, A, layout, last, model=True):
        """Layer ``layer`` of the forward pass with its activations on the mesh
        (``docs/mesh.md``, "Resident layers"): layer 0 loads ``A`` (the batch), every other
        layer reads it where the layer below wrote it (slots from ``layout["inputs"][layer]``,
        feature ``i`` in row ``i % rows``); the bias is added on the mesh; a hidden layer's
        ``relu`` goes into the next region of ``X`` and leaves as it is written, the last
        layer's totals leave raw and are requantised here. ``(Y, figures, overflow)``."""
        cfg, fmt = self.config, self.config.fmt
        figures = PassFigures()
        n_out, n_in = weights.shape
        inputs = layout["inputs"]
        placement = None if layer == 0 else _region(cfg.rows, n_in, inputs[layer])
        if last:
            out = {"raw": True}
        else:
            out = {"act": True, "out_placement": _region(cfg.rows, n_out, inputs[layer + 1])}
        program = compile_gemm(cfg, weights, A, in_placement=placement, bias=bias,
                               load=layer == 0, **out)
        result = self._run(program, figures, model)
        overflow = result.overflow
        Y = np.asarray(result.y, dtype=np.int64)
        if last:
            Y, saturated = numerics.requantise(fmt, Y)
            overflow |= bool(saturated.any())
        return Y, figures, overflow

    def _figures(self, passes):
        """The reply's figures: ``passes`` maps a pass to ``(PassFigures, overflow)``;
        ``checks`` counts the results compared so far, ``mismatches`` the numbers that differed
        in this request."""
        figures = {"overflow": {k: bool(v[1]) for k, v in passes.items()},
                   "checks": self.checks, "mismatches": self.mismatches}
        for name in PassFigures.REPLY:
            figures[name] = {k: int(getattr(v[0], name)) for k, v in passes.items()}
        self.mismatches = 0
        return figures

    # -- the passes ---------------------------------------------------------------------------

    def resident_delta(self, layer, weights, dY, layout, active, *, loaded, model=True):
        """Layer ``layer``'s delta pass with its deltas on the mesh (``docs/mesh.md``,
        "Resident layers"): ``dY`` (the loss's deltas, ``loaded`` at ``layout["deltas"]``, or
        the layer above's, where its delta pass wrote them) times ``weights`` (the layer's
        ``W^T``), each result written by CR_DELTA over the layer's input activations where
        they are nonzero (``active``: the ReLU's derivative) and 0 elsewhere, and sent out as
        it is written (the weight-gradient pass below streams it).
        ``(dZ, figures, overflow)``."""
        rows = self.config.rows
        n_out, n_in = weights.shape
        first = layout["deltas"] if loaded else layout["inputs"][layer + 1]
        program = compile_gemm(self.config, weights, dY,
                               in_placement=_region(rows, n_in, first),
                               out_placement=_region(rows, n_out, layout["inputs"][layer]),
                               keep=active, load=loaded)
        figures = PassFigures()
        result = self._run(program, figures, model)
        return np.asarray(result.y, dtype=np.int64), figures, result.overflow

    def transposed_delta(self, layer, weights, dY, layout, active, model=True):
        """Layer ``layer``'s delta pass transposed (``docs/mesh.md``, "The transposed backward
        pass"): ``dZ^T = dY^T @ W`` with ``W`` loaded as ``X`` (from ``layout["weights"]``) and
        the deltas streamed, kept where ``active`` (the layer's inputs passed the ReLU) by
        CR_DELTA into ``layout["gradient"]``, where the weight-gradient pass of the layer below
        reads it. ``(dZ, figures, overflow)``."""
        rows = self.config.rows
        n_out, n_in = weights.shape
        W = weights.dense()
        program = compile_gemm(self.config, SparseRows.from_dense(dY.T), W,
                               in_placement=_region(rows, n_out, layout["weights"]),
                               out_placement=_region(rows, dY.shape[1], layout["gradient"]),
                               keep=np.asarray(active).T)
        figures = PassFigures()
        # the dense layer: the same stream (the deltas) over a W with every weight nonzero
        # (a zero weight, in X, costs no cycle)
        every = np.where(numerics.is_zero(self.config.fmt, W), numerics.one(self.config.fmt), W)
        result = self._run(program, figures, model, dense_model=predict_cycles, dense_x=every)
        return np.asarray(result.y, dtype=np.int64).T, figures, result.overflow

    def op_forward(self, layer, stream, last, x=None, train=True, layout=None):
        """Layer ``layer``'s forward pass on this shard (``x``: the input, for layer 0);
        ``layout``: where the activations stay in the cores' ``X``
        (:attr:`~fabric.config.TrainSizing.layout`), or empty: every layer loads its input
        and reads its output back, and the host adds the bias and applies the ReLU."""
        s = LayerStream.from_fields(stream)
        if layer == 0:
            if x is None:
                raise ValueError("layer 0 needs the input shard x")
            A = np.asarray(x, dtype=np.int64)
        elif self._next_input is None:
            raise ValueError(f"layer {layer}'s forward pass before layer {layer - 1}'s")
        else:
            A = self._next_input
        weights = s.weights()
        fmt = self.config.fmt
        if layout:
            Y, figures, overflow = self.resident_layer(layer, weights, s.bias, A, layout,
                                                       last, model=train)
        else:
            Z, figures, overflow = self.gemm(weights, A, model=train)
            Y, beyond = add_bias(fmt, Z, s.bias)
            if fmt.is_float:       # made infinite; int16's saturation here is not counted
                overflow |= beyond
        figures.count_macs(weights, A)
        if train:
            self.inputs[layer] = A
        reply = self._figures({"forward": (figures, overflow)})
        if last:
            reply["y"] = Y
        else:
            self.active[layer] = positive(fmt, Y)
            self._next_input = np.where(self.active[layer], Y, 0)
        return reply

    def op_backward(self, layer, stream, dy=None, layout=None):
        """Layer ``layer``'s gradient pass and (below layer 0) delta pass; ``dy`` for the last
        layer, else the delta kept from the layer above; ``layout`` as for
        :meth:`op_forward` (the deltas then stay on the mesh too: :meth:`resident_delta`)."""
        s = LayerStream.from_fields(stream)
        dY = np.asarray(dy, dtype=np.int64) if dy is not None else self.delta
        if dY is None or layer not in self.inputs:
            raise ValueError(f"backward of layer {layer} before its forward pass or without dY")
        A = self.inputs.pop(layer)
        fmt = self.config.fmt
        passes = {}
        transposed = bool(layout and layout.get("transposed"))
        # with resident activations, the gradient pass's features go above them; transposed,
        # below the top layer they are there already (the delta pass above wrote dZ^T)
        gemm = functools.partial(self.gemm, first=layout["gradient"],
                                 resident=transposed and dy is None) if layout else self.gemm
        dW, figures, overflow = gradient_gemm(gemm, s.shape, s.rows, s.indices, dY, A,
                                              transposed=True if transposed else None)
        figures.useful_macs, figures.dense_macs = gradient_macs(s.shape, s.rows, s.indices,
                                                                dY, A)
        passes["gradient"] = figures, overflow
        if layer > 0 and transposed:
            dZ, figures, overflow = self.transposed_delta(layer, s.weights(), dY, layout,
                                                          self.active.pop(layer - 1))
            figures.count_macs(s.weights().transpose(), dY)
            passes["delta"] = figures, overflow
            self.delta = canonical_zero(fmt, dZ)
        elif layer > 0 and layout:
            weights = s.weights().transpose()
            dZ, figures, overflow = self.resident_delta(layer, weights, dY, layout,
                                                        self.active.pop(layer - 1),
                                                        loaded=dy is not None)
            figures.count_macs(weights, dY)
            passes["delta"] = figures, overflow
            self.delta = canonical_zero(fmt, dZ)
        elif layer > 0:
            weights = s.weights().transpose()
            dA, figures, overflow = self.gemm(weights, dY)
            figures.count_macs(weights, dY)
            passes["delta"] = figures, overflow
            self.delta = canonical_zero(fmt, np.where(self.active.pop(layer - 1), dA, 0))
        else:
            self.delta = None
        try:
            sums = {"dW": gradient_sum(fmt, dW), "db": delta_sum(fmt, dY)}
        except ValueError as error:
            raise ValueError(f"layer {layer}'s gradient: {error}: the binary32 accumulation "
                             f"overflowed (the run diverged)") from None
        return sums | self._figures(passes)

    def op_close(self):
        self.close()
        return {}

    def close(self):
        if self.system is not None:
            self.system.close()
            self.system = None


def _region(rows, n, first):
    """Where a resident layer's ``n`` activations lie: feature ``i`` in row ``i % rows``, slot
    ``first + i // rows``."""
    i = np.arange(n)
    return Placement(rows, i % rows, first + i // rows, kind="resident")
