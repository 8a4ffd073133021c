"""MemoryX: the weight store that holds the model, streams it layer by layer and trains it.

It keeps every layer's float32 master weights, bias, mask and optimizer state in a
:class:`~host.tiers.TieredStore` (a byte-bounded in-memory tier over ``numpy.memmap`` files),
induces sparsity on the schedule of each sparse layer (:mod:`host.sparsity`), streams a layer
quantised to the datapath format, ``int16`` or ``bf16`` (:class:`~host.layer_stream.LayerStream`;
quantised and encoded once, then reused until the layer changes), turns SwarmX's exact gradient
sums into float (:meth:`MemoryX.update_sums`) and applies them with its optimizer
(:mod:`host.optim`) only inside the mask, and checkpoints to one file atomically
(:mod:`host.checkpoint`), recording the format; a checkpoint is checked whole before anything in
the store changes.

Weights start as ``torch.nn.Linear`` does: ``W`` and ``b`` uniform in
``±1/sqrt(n_in)``, from a seeded generator.
"""

import json
from dataclasses import asdict, dataclass

import numpy as np

from wse.rtl.numfmt import FixedPoint, number_format
from wse.rtl.validate import count, integer

from . import checkpoint
from .layer_stream import LayerStream
from .numbers import LIMBS, exact_float, format_name
from .optim import Adam, Optimizer, make_optimizer
from .sparsity import SparsitySchedule, magnitude_mask, random_mask, reselect
from .tiers import TieredStore

__all__ = ["LayerSpec", "MemoryX", "CheckpointError"]

CheckpointError = checkpoint.CheckpointError


@dataclass(frozen=True)
class LayerSpec:
    """A fully connected layer ``n_in -> n_out``; ``sparse`` layers follow the schedule."""
    name: str
    n_in: int
    n_out: int
    sparse: bool = False

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"layer name must be an identifier, not {self.name!r}")
        for field in ("n_in", "n_out"):
            count(field, getattr(self, field))


class MemoryX:
    """The model's store (``docs/host.md``).

    Parameters
    ----------
    layers : sequence of LayerSpec
    fmt : FixedPoint or BFloat16 (or its name, ``"int16"`` or ``"bf16"``), the datapath format
        layers are streamed in.
    optimizer : Optimizer (Adam with lr 1e-3 by default).
    schedule : SparsitySchedule for the sparse layers, or None (every layer dense).
    memory_bytes, directory : the tiers (:class:`~host.tiers.TieredStore`).
    seed : int, for the initial weights and the random masks.
    """

    def __init__(self, layers, *, fmt=None, optimizer=None, schedule=None, memory_bytes=None,
                 directory=None, seed=0):
        self.layers = list(layers)
        names = [spec.name for spec in self.layers]
        if not self.layers or len(set(names)) != len(names):
            raise ValueError(f"layers must be a non-empty list with unique names, not {names}")
        for a, b in zip(self.layers, self.layers[1:]):
            if a.n_out != b.n_in:
                raise ValueError(f"layer {b.name} takes {b.n_in} inputs but {a.name} gives "
                                 f"{a.n_out}")
        self.fmt = number_format(fmt)
        self.optimizer = Adam() if optimizer is None else optimizer
        if not isinstance(self.optimizer, Optimizer):
            raise ValueError(f"optimizer must be an Optimizer, not {self.optimizer!r}")
        if schedule is not None and not isinstance(schedule, SparsitySchedule):
            raise ValueError(f"schedule must be a SparsitySchedule or None, not {schedule!r}")
        self.schedule = schedule
        self.seed = int(seed)
        self.store = TieredStore(memory_bytes, directory)
        self.t = 0                              # optimizer steps taken
        self._streams = {}                      # layer -> its stream until it changes
        self.rng = np.random.default_rng([self.seed, 1])
        init = np.random.default_rng([self.seed, 0])
        for spec in self.layers:
            bound = 1 / np.sqrt(spec.n_in)
            W = init.uniform(-bound, bound, (spec.n_out, spec.n_in)).astype(np.float32)
            b = init.uniform(-bound, bound, spec.n_out).astype(np.float32)
            self.store.put(spec.name, self._group(W, b, np.ones(W.shape, dtype=bool)))

    def _group(self, W, b, mask):
        group = {"W": W, "b": b, "mask": mask}
        for param, value in (("W", W), ("b", b)):
            for key, shape in self.optimizer.state_shapes(value.shape).items():
                group[f"{param}.{key}"] = np.zeros(shape, dtype=np.float32)
        return group

    def spec(self, name):
        for spec in self.layers:
            if spec.name == name:
                return spec
        raise KeyError(f"no layer {name!r}; the layers are {[s.name for s in self.layers]}")

    # -- sparsity -----------------------------------------------------------------------------

    def induce(self, step):
        """Apply the schedule at ``step`` to every sparse layer; returns ``{layer: sparsity}``
        for the layers whose mask changed."""
        changed = {}
        if self.schedule is None:
            return changed
        s = self.schedule
        for spec in self.layers:
            if not spec.sparse:
                continue
            g = self.store.get(spec.name)
            mask, grown = g["mask"], None
            if s.kind == "random":
                if mask.all():
                    new = random_mask(mask.shape, s.final, self.rng)
                else:
                    continue
            elif s.prunes_at(step):
                new = magnitude_mask(g["W"], s.target(step), within=mask)
            elif s.reselects_at(step):
                new, grown = reselect(g["W"], mask, s.reselect_fraction, self.rng)
            else:
                continue
            if np.array_equal(new, mask):
                continue
            dead = ~new if grown is None else (~new | grown)
            for key, a in g.items():
                if key != "mask" and a.shape == mask.shape:
                    a[dead] = 0
            g["mask"][...] = new
            self._streams.pop(spec.name, None)
            changed[spec.name] = self.sparsity(spec.name)
        return changed

    def sparsity(self, name):
        """The fraction of ``name``'s weights outside its mask."""
        mask = self.store.get(name)["mask"]
        return 1.0 - float(np.count_nonzero(mask)) / mask.size

    # -- streaming and updating ---------------------------------------------------------------

    def stream(self, name):
        """Layer ``name`` quantised to the datapath format, as a :class:`LayerStream` (read-only
        arrays). Quantised once until the layer changes (an update, a new mask, a checkpoint
        loaded): a step's forward and backward passes broadcast the same stream. The stream,
        the compressed layer, is kept outside the tiers' bound."""
        if name not in self._streams:
            self.spec(name)
            g = self.store.get(name)
            stream = LayerStream.from_dense(name, self.fmt, g["W"], g["mask"], g["b"])
            for array in (stream.indptr, stream.indices, stream.values, stream.bias):
                array.flags.writeable = False
            self._streams[name] = stream
        return self._streams[name]

    def update_sums(self, sums, *, loss_scale, batch):
        """One optimizer step from SwarmX's sums: ``sums`` is ``{layer: (dW, db)}`` of exact
        sums, ``dW`` at the mask's indices (or full), ``db`` of deltas, both of the loss scaled
        by ``loss_scale`` and summed over ``batch`` samples. Fixed point: integers, ``dW`` in
        the fixed point of products (``2 * frac_bits``), ``db`` of deltas (``frac_bits``),
        divided by all of that here in ``float64``. bf16: exact sums of binary32 values
        (:func:`~host.numbers.exact`, ``[..., LIMBS]`` digits), each rounded once to
        ``float64`` (:func:`~host.numbers.exact_float`), then divided by
        ``loss_scale * batch``. Then applied as :meth:`update` does."""
        loss_scale, batch = count("loss_scale", loss_scale), count("batch", batch)
        scale = float(loss_scale * batch)
        grads = {}
        for name, (dW, db) in sums.items():
            dW, db = np.asarray(dW), np.asarray(db)
            for what, a in (("dW", dW), ("db", db)):
                if a.dtype.kind not in "iu":
                    raise ValueError(f"{name}: {what} must be integer sums, not {a.dtype} values")
                if self.fmt.is_float and a.shape[-1:] != (LIMBS,):
                    raise ValueError(f"{name}: {what} must be exact sums of {LIMBS} digits "
                                     f"(bf16), not shape {a.shape}")
            if self.fmt.is_float:
                grads[name] = exact_float(dW) / scale, exact_float(db) / scale
                continue
            f = self.fmt.frac_bits
            grads[name] = (dW.astype(np.float64) / ((1 << 2 * f) * scale),
                           db.astype(np.float64) / ((1 << f) * scale))
        self.update(grads)

    def update(self, grads):
        """One optimizer step: ``grads`` is ``{layer: (dW, db)}``, ``dW`` either the full
        ``(n_out, n_in)`` gradient or its values at the mask's indices (row-major, the order of
        :class:`LayerStream`). Only weights inside the mask change."""
        missing = {s.name for s in self.layers} - set(grads)
        if missing:
            raise ValueError(f"no gradients for layers {sorted(missing)}")
        checked = {}
        for spec in self.layers:        # every gradient checked before anything changes
            dW, db = grads[spec.name]
            mask = self.store.get(spec.name)["mask"]
            dW = np.asarray(dW, dtype=np.float32)
            db = np.asarray(db, dtype=np.float32)
            if dW.shape != mask.shape:
                if dW.shape != (np.count_nonzero(mask),):
                    raise ValueError(f"{spec.name}: dW must be {mask.shape} or its "
                                     f"{np.count_nonzero(mask)} masked values, not {dW.shape}")
                full = np.zeros(mask.shape, dtype=np.float32)
                full[mask] = dW
                dW = full
            if db.shape != (spec.n_out,):
                raise ValueError(f"{spec.name}: db must be ({spec.n_out},), not {db.shape}")
            checked[spec.name] = dW, db
        self.t += 1
        self._streams.clear()
        for spec in self.layers:
            dW, db = checked[spec.name]
            g = self.store.get(spec.name)
            mask = g["mask"]
            for param, grad, where in (("W", dW, mask), ("b", db, None)):
                state = {k.split(".", 1)[1]: a for k, a in g.items()
                         if k.startswith(param + ".")}
                self.optimizer.step(g[param], grad, state, self.t, mask=where)

    def assign(self, name, W, b):
        """Set layer ``name``'s float32 masters to ``W`` (``(n_out, n_in)``) and ``b``
        (``(n_out,)``), keeping its mask and optimizer state; the next stream carries them.
        ``ValueError`` before anything changes if a shape is wrong, a value is not finite, or a
        weight outside the mask is not zero."""
        spec = self.spec(name)
        g = self.store.get(name)
        W, b = np.asarray(W, dtype=np.float32), np.asarray(b, dtype=np.float32)
        for what, a, shape in (("W", W, (spec.n_out, spec.n_in)), ("b", b, (spec.n_out,))):
            if a.shape != shape:
                raise ValueError(f"{name}: {what} must be {shape}, not {a.shape}")
            if not np.isfinite(a).all():
                raise ValueError(f"{name}: {what} holds values that are not finite")
        outside = int(np.count_nonzero(W[~g["mask"]]))
        if outside:
            raise ValueError(f"{name}: {outside} weights outside the layer's mask are not zero")
        g["W"][...] = W
        g["b"][...] = b
        self._streams.pop(name, None)

    # -- identity, size -----------------------------------------------------------------------

    def weights(self, name):
        """``(W, b)`` of layer ``name`` (float32 copies)."""
        g = self.store.get(name)
        return np.array(g["W"]), np.array(g["b"])

    def digest(self):
        """SHA-256 of every layer's weights, biases and mask: equal digests, equal models."""
        arrays = {}
        for spec in self.layers:
            g = self.store.get(spec.name)
            for key in ("W", "b", "mask"):
                arrays[f"{spec.name}/{key}"] = np.asarray(g[key])
        return checkpoint.digest(arrays)

    def model_bytes(self):
        """Bytes of the weights and biases as float32 (the model's size)."""
        return sum(4 * (s.n_out * s.n_in + s.n_out) for s in self.layers)

    # -- checkpoints --------------------------------------------------------------------------

    def _meta(self):
        return {"layers": [asdict(s) | {"n_in": int(s.n_in), "n_out": int(s.n_out)}
                           for s in self.layers],
                "fmt": self.fmt.to_dict() if self.fmt.is_float else {
                    "width": self.fmt.width, "frac_bits": self.fmt.frac_bits,
                    "acc_width": self.fmt.acc_width},
                "optimizer": {"name": self.optimizer.name, **self.optimizer.hyper()},
                "schedule": None if self.schedule is None else self.schedule.to_dict(),
                "seed": self.seed, "t": self.t, "rng": self.rng.bit_generator.state}

    def save(self, path, extra=None):
        """Checkpoint everything (and ``extra``, JSON-able) to ``path`` atomically; returns the
        checkpoint's digest."""
        arrays = {}
        for spec in self.layers:
            for key, a in self.store.get(spec.name).items():
                arrays[f"{spec.name}/{key}"] = np.asarray(a)
        return checkpoint.save(path, {"memoryx": self._meta(), "extra": extra}, arrays)

    def load(self, path, check=None):
        """Resume from a checkpoint of this same model; returns its ``extra``, or what
        ``check(extra, t)`` returns: the caller's validation of its own fields, given the
        checkpoint's optimizer step count ``t`` (run before the model's checks, so that a run
        of other settings is named as such). A corrupt, mismatched or ill-formed checkpoint
        (wrong metadata, NaN or infinity in a weight or the optimizer's state, weights outside
        the mask) raises :class:`CheckpointError` naming the problem and changes nothing."""
        meta, arrays = checkpoint.load(path)
        mine = self._meta()
        theirs = meta.get("memoryx") if isinstance(meta, dict) else None
        if not isinstance(theirs, dict):
            raise CheckpointError(f"checkpoint {path} holds no MemoryX state")
        try:
            t = integer("t", theirs.get("t"), 0)
        except ValueError as error:
            raise CheckpointError(f"checkpoint {path}: its optimizer step count {error}") \
                from None
        self._check_format(path, theirs.get("fmt"))
        extra = meta.get("extra")
        if check is not None:
            extra = check(extra, t)
        for key in ("layers", "optimizer", "schedule"):
            if json.dumps(theirs.get(key), sort_keys=True) != json.dumps(mine[key],
                                                                         sort_keys=True):
                hint = (" (the schedule follows the run's length: resume with the same steps "
                        "or epochs and sparsity settings)" if key == "schedule" else "")
                raise CheckpointError(f"checkpoint {path} is for another model: its {key} is "
                                      f"{theirs.get(key)!r}, this store's is {mine[key]!r}"
                                      f"{hint}")
        groups = {}
        for spec in self.layers:
            current = self.store.get(spec.name)
            group = {}
            for key, a in current.items():
                name = f"{spec.name}/{key}"
                if name not in arrays:
                    raise CheckpointError(f"checkpoint {path} lacks array {name}")
                if arrays[name].shape != a.shape or arrays[name].dtype != a.dtype:
                    raise CheckpointError(f"checkpoint {path}: {name} is {arrays[name].dtype} "
                                          f"{arrays[name].shape}, expected {a.dtype} {a.shape}")
                group[key] = arrays[name]
            self._check_group(path, spec.name, group)
            groups[spec.name] = group
        extra_arrays = set(arrays) - {f"{n}/{k}" for n, g in groups.items() for k in g}
        if extra_arrays:
            raise CheckpointError(f"checkpoint {path} has arrays this model does not: "
                                  f"{sorted(extra_arrays)[:4]}")
        rng = np.random.default_rng()
        state = theirs.get("rng")
        try:
            rng.bit_generator.state = state
        except (TypeError, ValueError, KeyError, OverflowError) as error:
            raise CheckpointError(f"checkpoint {path} has no valid mask generator state: "
                                  f"{error}") from None
        if rng.bit_generator.state != state:        # e.g. a fraction the generator truncated
            raise CheckpointError(f"checkpoint {path} has no valid mask generator state: "
                                  f"{state!r:.120}")
        for name, group in groups.items():           # nothing changes before this line
            self.store.put(name, group)
        self.t, self.rng = t, rng
        self._streams.clear()
        return extra

    def _check_format(self, path, fmt):
        """``CheckpointError`` unless the checkpoint's format ``fmt`` (its ``to_dict``, or the
        fixed point's fields alone: a checkpoint from before bf16, which is int16) is this
        store's."""
        try:
            theirs = number_format(fmt if fmt is not None else FixedPoint())
        except (TypeError, ValueError) as error:
            raise CheckpointError(f"checkpoint {path} records no valid number format: "
                                  f"{error}") from None
        if theirs != self.fmt:
            name = format_name(theirs)
            raise CheckpointError(f"checkpoint {path} was trained in {name}, this run is in "
                                  f"{format_name(self.fmt)}: resume with --format {name}")

    def _check_group(self, path, layer, group):
        """``CheckpointError`` if a float array of ``layer`` holds NaN or infinity, the
        optimizer's state is out of its domain, or anything outside the mask is not zero."""
        mask = group["mask"]
        for key, a in group.items():
            if a.dtype.kind == "f" and not np.isfinite(a).all():
                bad = np.argwhere(~np.isfinite(a))[0]
                raise CheckpointError(f"checkpoint {path}: {layer}/{key} holds "
                                      f"{float(a[tuple(bad)])} at {bad.tolist()}; weights and "
                                      f"optimizer state must be finite")
            if key.split(".", 1)[-1] in self.optimizer.nonnegative_state and (a < 0).any():
                raise CheckpointError(f"checkpoint {path}: {layer}/{key} holds negative values; "
                                      f"it must not")
            if key != "mask" and a.shape == mask.shape and a[~mask].any():
                raise CheckpointError(f"checkpoint {path}: {layer}/{key} is not zero outside "
                                      f"the layer's mask")

    def close(self):
        self.store.close()


def optimizer_from_meta(meta):
    """The optimizer a checkpoint's ``optimizer`` entry describes."""
    meta = dict(meta)
    return make_optimizer(meta.pop("name"), **meta)
