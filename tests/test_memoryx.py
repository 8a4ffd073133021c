"""MemoryX: tiers, sparsity induction, streaming, masked updates, atomic checkpoints."""

import json
import math
import zipfile

import numpy as np
import pytest

from wse.fabric import numerics
from wse.host import checkpoint
from wse.host.layer_stream import LayerStream, quantise
from wse.host.memoryx import CheckpointError, LayerSpec, MemoryX
from wse.host.messages import decode, encode
from wse.host.numbers import LIMBS, exact, exact_sum
from wse.host.optim import SGD, Adam
from wse.host.sparsity import SparsitySchedule, magnitude_mask, random_mask, reselect
from wse.host.tiers import TieredStore
from wse.rtl.numfmt import FixedPoint

SPECS = [LayerSpec("fc0", 12, 16, sparse=True), LayerSpec("fc1", 16, 5)]


def _store(**kwargs):
    kwargs.setdefault("schedule", SparsitySchedule(0.75, kind="gradual", start=0, end=4,
                                                   every=2))
    return MemoryX(SPECS, optimizer=kwargs.pop("optimizer", Adam(0.01)), seed=3, **kwargs)


def _grads(mx, seed):
    rng = np.random.default_rng(seed)
    return {s.name: (rng.normal(size=(s.n_out, s.n_in)), rng.normal(size=s.n_out))
            for s in mx.layers}


def _train(mx, steps, first=0):
    for step in range(first, first + steps):
        mx.induce(step)
        mx.update(_grads(mx, step))


# -- sparsity ---------------------------------------------------------------------------------

def test_magnitude_mask_keeps_the_largest():
    W = np.array([[0.1, -3.0, 0.2], [2.0, -0.05, 1.0]])
    assert magnitude_mask(W, 0.5).tolist() == [[False, True, False], [True, False, True]]
    assert magnitude_mask(W, 0.0).all()
    within = np.array([[1, 0, 1], [1, 1, 1]], dtype=bool)
    m = magnitude_mask(W, 0.5, within=within)
    assert not m[0, 1] and m.sum() == 3


def test_random_mask_count_and_seed():
    a = random_mask((40, 50), 0.9, np.random.default_rng(1))
    b = random_mask((40, 50), 0.9, np.random.default_rng(1))
    assert a.sum() == 200 and np.array_equal(a, b)


def test_reselect_keeps_the_count_and_drops_the_weakest():
    rng = np.random.default_rng(0)
    W = rng.normal(size=(10, 10))
    mask = magnitude_mask(W, 0.8)
    new, grown = reselect(W, mask, 0.25, rng)
    assert new.sum() == mask.sum() == 20 and grown.sum() == 5
    assert not (grown & mask).any()
    dropped = mask & ~new
    assert np.abs(W[dropped]).max() <= np.abs(W[mask & new]).min()


def test_gradual_schedule_is_the_cubic_ramp():
    s = SparsitySchedule(0.9, start=10, end=110, every=10)
    assert s.target(0) == 0.0 and s.target(110) == s.target(500) == 0.9
    assert s.target(60) == pytest.approx(0.9 - 0.9 * 0.5 ** 3)
    assert [t for t in range(130) if s.prunes_at(t)] == list(range(10, 111, 10))


@pytest.mark.parametrize("kwargs, message", [
    ({"final": 1.0}, "final sparsity must be a finite number at least 0.0 and below 1.0, not 1.0"),
    ({"final": 0.5, "kind": "lottery"}, "kind must be one of gradual, random, dynamic"),
    ({"final": 0.5, "start": 5, "end": 2}, "end (2) must not come before start (5)"),
    ({"final": 0.5, "every": 0}, "every must be an integer of at least 1"),
])
def test_schedule_rejects_bad_parameters(kwargs, message):
    with pytest.raises(ValueError) as info:
        SparsitySchedule(**kwargs)
    assert message in str(info.value)


def test_induce_prunes_and_updates_stay_in_the_mask():
    mx = _store()
    _train(mx, 6)
    assert mx.sparsity("fc0") == pytest.approx(0.75)
    assert mx.sparsity("fc1") == 0.0
    g = mx.store.get("fc0")
    assert not g["W"][~g["mask"]].any()
    for key in ("W.exp_avg", "W.exp_avg_sq"):
        assert not g[key][~g["mask"]].any()


def test_dynamic_reselection_regrows_from_zero():
    mx = _store(schedule=SparsitySchedule(0.5, kind="dynamic", end=1, reselect_every=2,
                                          reselect_fraction=0.25))
    _train(mx, 2)
    before = mx.store.get("fc0")["mask"].copy()
    mx.induce(3)
    after = mx.store.get("fc0")["mask"]
    grown = after & ~before
    assert after.sum() == before.sum() and grown.sum() == round(0.25 * before.sum())
    assert not mx.store.get("fc0")["W"][grown].any()


# -- streaming --------------------------------------------------------------------------------

def test_stream_is_the_quantised_masked_layer():
    mx = _store()
    _train(mx, 5)
    W, b = mx.weights("fc0")
    mask = mx.store.get("fc0")["mask"]
    s = mx.stream("fc0")
    q, _ = quantise(mx.fmt, W)
    assert np.array_equal(s.dense(), np.where(mask, q, 0))
    assert np.array_equal(s.mask(), mask)
    assert s.values.size == mask.sum() and s.nnz <= mask.sum()
    assert np.array_equal(s.bias, quantise(mx.fmt, b)[0])
    again = LayerStream.from_fields(decode(encode({"stream": s.fields()}))["stream"])
    assert np.array_equal(again.dense(), s.dense()) and again.shape == s.shape
    assert again.name == "fc0" and np.array_equal(again.bias, s.bias)
    assert s.nbytes == len(encode(s.fields()))


def test_a_layer_is_quantised_once_until_it_changes(tmp_path):
    mx = _store()
    _train(mx, 1)
    first = mx.stream("fc0")
    assert mx.stream("fc0") is first and not first.values.flags.writeable
    mx.save(tmp_path / "ckpt.npz")
    mx.update(_grads(mx, 7))                 # the weights change: a new stream
    changed = mx.stream("fc0")
    assert not np.array_equal(changed.values, first.values)
    mx.induce(2)                             # the schedule prunes at step 2: a new mask
    assert mx.stream("fc0") is not changed
    assert np.array_equal(mx.stream("fc0").mask(), mx.store.get("fc0")["mask"])
    mx.load(tmp_path / "ckpt.npz")           # back to the checkpoint's weights
    again = mx.stream("fc0")
    assert again is not first and encode(again.fields()) == encode(first.fields())


def test_memoryx_turns_fixed_point_sums_into_gradients():
    """``update_sums`` divides the sums by the fixed-point scales, the loss scale and the batch:
    the same step as ``update`` of the float gradients."""
    a, b = _store(), _store()
    _train(a, 2)
    _train(b, 2)
    f, loss_scale, batch = a.fmt.frac_bits, 16, 24
    rng = np.random.default_rng(3)
    sums, grads = {}, {}
    for spec in a.layers:
        mask = a.store.get(spec.name)["mask"]
        dW = rng.integers(-2 ** 40, 2 ** 40, np.count_nonzero(mask))
        db = rng.integers(-2 ** 20, 2 ** 20, spec.n_out)
        sums[spec.name] = dW, db
        grads[spec.name] = (dW / ((1 << 2 * f) * float(loss_scale * batch)),
                            db / ((1 << f) * float(loss_scale * batch)))
    a.update_sums(sums, loss_scale=loss_scale, batch=batch)
    b.update(grads)
    assert a.digest() == b.digest()
    with pytest.raises(ValueError, match="fc0: dW must be integer sums, not float64 values"):
        a.update_sums({n: (dW.astype(float), db) for n, (dW, db) in sums.items()},
                      loss_scale=16, batch=24)
    with pytest.raises(ValueError, match="batch must be a positive integer, not 0"):
        a.update_sums(sums, loss_scale=16, batch=0)


def test_a_bf16_stream_carries_bit_patterns_and_skips_zeros():
    """bf16: ``uint16`` bit patterns of the masters rounded to nearest even; a masked weight
    that is ``±0`` (or rounds to it) is streamed as ``+0`` and skipped like any zero."""
    mx = _store(fmt="bf16")
    _train(mx, 5)
    g = mx.store.get("fc0")
    mask = g["mask"]
    live = np.argwhere(mask)
    W = g["W"].copy()
    W[tuple(live[0])], W[tuple(live[1])] = -0.0, -1e-45
    mx.assign("fc0", W, g["b"])
    s = mx.stream("fc0")
    assert s.values.dtype == np.uint16 and s.bias.dtype == np.uint16
    want = numerics.from_float32(g["W"], operand=True)
    assert np.array_equal(s.dense(), np.where(mask & (want & 0x7FFF != 0), want, 0))
    assert s.nnz == np.count_nonzero(mask) - 2 and s.weights().values.size == s.nnz
    assert np.array_equal(s.bias, numerics.from_float32(g["b"], operand=True))
    assert decode(encode(s.fields()))["values"].dtype == np.uint16


def test_memoryx_turns_bf16_exact_sums_into_gradients():
    """bf16: the exact sums, rounded once to float64 and divided by the loss scale and the
    batch, are the step ``update`` takes of those float gradients."""
    a, b = _store(fmt="bf16"), _store(fmt="bf16")
    _train(a, 2)
    _train(b, 2)
    rng = np.random.default_rng(4)
    sums, grads = {}, {}
    for spec in a.layers:
        n = np.count_nonzero(a.store.get(spec.name)["mask"])
        parts = [numerics.from_float32(rng.normal(0, 100, (size, 7)).astype(np.float32))
                 for size in (n, spec.n_out)]
        sums[spec.name] = tuple(exact_sum(p, axis=1) for p in parts)
        grads[spec.name] = tuple(np.array([math.fsum(row) for row in numerics.as_float32(p)
                                           .astype(np.float64)]) / (16 * 24) for p in parts)
    a.update_sums(sums, loss_scale=16, batch=24)
    b.update(grads)         # math.fsum: the sum correctly rounded, as exact_float rounds it
    assert a.digest() == b.digest()
    with pytest.raises(ValueError, match=f"fc0: dW must be exact sums of {LIMBS} digits"):
        a.update_sums({n: (dW[:, 0], db) for n, (dW, db) in sums.items()}, loss_scale=16,
                      batch=24)
    assert exact(numerics.from_float32(np.ones(3, np.float32))).shape == (3, LIMBS)


def test_quantise_rounds_half_to_even_and_saturates():
    fmt = FixedPoint(width=16, frac_bits=8)
    q, saturated = quantise(fmt, [0.5 / 256, 1.5 / 256, -0.5 / 256, 200.0, -200.0])
    assert q.tolist() == [0, 2, 0, 32767, -32768] and saturated == 2


def test_update_takes_masked_values_or_full_gradients():
    a, b = _store(), _store()
    _train(a, 5)
    _train(b, 5)
    grads = _grads(a, 99)
    masked = {n: (dW[a.store.get(n)["mask"]], db) for n, (dW, db) in grads.items()}
    a.update(grads)
    b.update(masked)
    assert a.digest() == b.digest()
    with pytest.raises(ValueError, match="fc0: dW must be"):
        b.update({"fc0": (np.zeros(3), np.zeros(16)), "fc1": grads["fc1"]})
    with pytest.raises(ValueError, match=r"no gradients for layers \['fc1'\]"):
        b.update({"fc0": grads["fc0"]})


def test_layers_must_chain():
    with pytest.raises(ValueError, match="layer b takes 3 inputs but a gives 4"):
        MemoryX([LayerSpec("a", 2, 4), LayerSpec("b", 3, 1)])
    with pytest.raises(ValueError, match="n_in must be a positive integer"):
        LayerSpec("a", 0, 1)


# -- tiers ------------------------------------------------------------------------------------

def test_tiers_spill_least_recently_used_and_load_back(tmp_path):
    store = TieredStore(memory_bytes=3000, directory=tmp_path)
    groups = {f"g{i}": {"a": np.full((10, 10), i, dtype=np.float64)} for i in range(4)}
    for name, g in groups.items():
        store.put(name, g)          # 800 bytes each: three fit
    assert store.tier_of("g0") == "disk" and store.tier_of("g3") == "memory"
    assert store.bytes_in_memory() <= 3000 and store.spills == 1
    assert (tmp_path / "g0" / "a.npy").is_file()
    store.get("g0")["a"][0, 0] = -1             # g0 comes back, g1 goes out
    assert store.tier_of("g0") == "memory" and store.tier_of("g1") == "disk"
    for i in range(4):
        want = np.full((10, 10), i, dtype=np.float64)
        want[0, 0] = -1 if i == 0 else i
        assert np.array_equal(store.get(f"g{i}")["a"], want)
    assert store.stats()["loads"] >= 2


def test_a_group_bigger_than_memory_streams_from_disk(tmp_path):
    store = TieredStore(memory_bytes=100, directory=tmp_path)
    store.put("big", {"a": np.zeros(1000, dtype=np.float32)})
    a = store.get("big")["a"]
    assert isinstance(a, np.memmap) and store.tier_of("big") == "disk"
    a[3] = 7
    assert store.get("big")["a"][3] == 7 and store.bytes_in_memory() == 0


def test_memoryx_trains_the_same_in_a_tiny_memory_tier(tmp_path):
    small = _store(memory_bytes=1500, directory=tmp_path)
    big = _store()
    _train(small, 6)
    _train(big, 6)
    assert small.digest() == big.digest()
    assert small.store.stats()["spills"] > 0 and small.store.stats()["disk_bytes"] > 0


# -- checkpoints ------------------------------------------------------------------------------

def test_checkpoint_resumes_exactly(tmp_path):
    straight = _store(optimizer=SGD(0.1, momentum=0.9))
    _train(straight, 8)
    first = _store(optimizer=SGD(0.1, momentum=0.9))
    _train(first, 4)
    first.save(tmp_path / "ckpt.npz", extra={"step": 4})
    resumed = _store(optimizer=SGD(0.1, momentum=0.9))
    assert resumed.load(tmp_path / "ckpt.npz") == {"step": 4}
    _train(resumed, 4, first=4)
    assert resumed.digest() == straight.digest()
    assert not list(tmp_path.glob("*.tmp"))


def _corrupt_byte(path):
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as z:
        info = z.getinfo("fc0/W.npy")
    at = info.header_offset + 30 + len(info.filename) + info.file_size // 2
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage, message", [
    (lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]), "corrupt or truncated"),
    (_corrupt_byte, "corrupt"),
    (lambda p: p.write_bytes(b"not a checkpoint"), "corrupt or truncated"),
    (lambda p: p.unlink(), "does not exist"),
])
def test_a_corrupt_checkpoint_fails_clearly_and_changes_nothing(tmp_path, damage, message):
    src = _store()
    _train(src, 3)
    path = tmp_path / "ckpt.npz"
    src.save(path)
    damage(path)
    dst = _store()
    _train(dst, 1)
    before = dst.digest(), dst.t
    with pytest.raises(CheckpointError) as info:
        dst.load(path)
    assert message in str(info.value)
    assert (dst.digest(), dst.t) == before


def _rewrite(path, change):
    """Rewrite the archive with ``change(arrays)`` applied: valid zip CRCs, stale SHA-256."""
    with np.load(path, allow_pickle=False) as archive:
        arrays = {name: archive[name] for name in archive.files}
    change(arrays)
    np.savez(path, **arrays)


def _bump_t(arrays):
    header = json.loads(arrays["__meta__"].tobytes())
    header["meta"]["memoryx"]["t"] += 1
    arrays["__meta__"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)


@pytest.mark.parametrize("change", [
    lambda a: a["fc0/W"].__setitem__((0, 0), a["fc0/W"][0, 0] + 1), _bump_t])
def test_the_sha256_catches_what_the_zip_crc_cannot(tmp_path, change):
    src = _store()
    _train(src, 2)
    src.save(tmp_path / "ckpt.npz")
    _rewrite(tmp_path / "ckpt.npz", change)
    dst = _store()
    before = dst.digest()
    with pytest.raises(CheckpointError, match="do not match the SHA-256"):
        dst.load(tmp_path / "ckpt.npz")
    assert dst.digest() == before


def test_a_well_formed_checkpoint_without_generator_state_changes_nothing(tmp_path):
    src = _store()
    _train(src, 2)
    src.save(tmp_path / "ckpt.npz")
    meta, arrays = checkpoint.load(tmp_path / "ckpt.npz")
    del meta["memoryx"]["rng"]
    checkpoint.save(tmp_path / "bad.npz", meta, arrays)
    dst = _store()
    before = dst.digest(), dst.t
    with pytest.raises(CheckpointError, match="no valid mask generator state"):
        dst.load(tmp_path / "bad.npz")
    assert (dst.digest(), dst.t) == before


def test_a_bad_gradient_changes_nothing():
    mx = _store()
    _train(mx, 2)
    before = mx.digest(), mx.t
    grads = _grads(mx, 5)
    grads["fc1"] = (grads["fc1"][0], np.zeros(4))
    with pytest.raises(ValueError, match=r"fc1: db must be \(5,\), not \(4,\)"):
        mx.update(grads)
    assert (mx.digest(), mx.t) == before


def test_a_checkpoint_of_another_model_is_refused(tmp_path):
    other = MemoryX([LayerSpec("fc0", 12, 16, sparse=True), LayerSpec("fc1", 16, 6)])
    other.save(tmp_path / "other.npz")
    mx = _store()
    before = mx.digest()
    with pytest.raises(CheckpointError, match="is for another model: its layers"):
        mx.load(tmp_path / "other.npz")
    sgd = _store(optimizer=SGD(0.1))
    sgd.save(tmp_path / "sgd.npz")
    with pytest.raises(CheckpointError, match="its optimizer"):
        mx.load(tmp_path / "sgd.npz")
    assert mx.digest() == before


def test_checkpoints_hold_numbers_only(tmp_path):
    with pytest.raises(ValueError, match="only numbers go in a checkpoint"):
        checkpoint.save(tmp_path / "x.npz", {}, {"a": np.array([object()])})
    checkpoint.save(tmp_path / "x.npz", {"k": 1}, {"a": np.arange(3)})
    meta, arrays = checkpoint.load(tmp_path / "x.npz")
    assert meta == {"k": 1} and arrays["a"].tolist() == [0, 1, 2]
