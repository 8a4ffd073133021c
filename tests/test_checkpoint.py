"""Checkpoints that must be refused: a member whose header lies about its size, metadata that is
well hashed but wrong, non-finite state, and a resume on other data settings. Each is a one-line
``CheckpointError`` naming the problem, and neither the file nor the running store changes."""

import hashlib
import io
import json
import zipfile

import numpy as np
import pytest

from wse.host import checkpoint
from wse.host.checkpoint import CheckpointError
from wse.host.train import Trainer, TrainSettings

SETTINGS = {"steps": 6, "hidden": (16,), "batch": 16}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A checkpoint after 3 of 6 steps."""
    path = tmp_path_factory.mktemp("ckpt") / "ckpt.npz"
    with Trainer(TrainSettings(**SETTINGS)) as trainer:
        for _ in range(3):
            trainer.step()
        trainer.save(path)
    return path


def _state(trainer):
    mx = trainer.memoryx
    return (mx.digest(), mx.t, mx.rng.bit_generator.state["state"], trainer.step_index,
            len(trainer.history), len(trainer.evaluations), dict(trainer.counts),
            trainer.golden_checks, dict(trainer.swarm.link_bytes),
            {s.name: mx.store.get(s.name)["W.exp_avg"].tobytes() for s in mx.layers})


def _refused(path, message, **settings):
    """Resuming from ``path`` raises a one-line CheckpointError containing ``message``; the
    file and a trainer one step in are unchanged."""
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    with Trainer(TrainSettings(**(SETTINGS | settings))) as trainer:
        trainer.step()
        before = _state(trainer)
        with pytest.raises(CheckpointError) as info:
            trainer.resume(path)
        assert _state(trainer) == before
    assert hashlib.sha256(path.read_bytes()).hexdigest() == sha
    text = str(info.value)
    assert message in text and "\n" not in text, text
    return text


def _rewritten(saved, tmp_path, change_meta=None, change_arrays=None):
    """A copy of ``saved`` with its metadata or arrays changed and the SHA-256 recomputed (a
    checkpoint whose hashes are valid but whose contents are wrong)."""
    meta, arrays = checkpoint.load(saved)
    if change_meta is not None:
        change_meta(meta)
    if change_arrays is not None:
        change_arrays(arrays)
    path = tmp_path / "bad.npz"
    checkpoint.save(path, meta, arrays)
    return path


# -- members that lie ---------------------------------------------------------------------------

def _replace_member(saved, tmp_path, name, data):
    path = tmp_path / "bad.npz"
    with zipfile.ZipFile(saved) as src, zipfile.ZipFile(path, "w") as dst:
        for info in src.infolist():
            dst.writestr(info.filename, data if info.filename == name else src.read(info))
    return path


def test_a_member_claiming_a_huge_shape_is_refused_before_any_allocation(saved, tmp_path):
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False,
                                                  "shape": (10 ** 6, 10 ** 6)})
    path = _replace_member(saved, tmp_path, "fc0/W.npy", header.getvalue() + bytes(64))
    text = _refused(path, "fc0/W")
    assert "its header claims a 1000000x1000000 float32 array" in text


def test_a_compressed_member_is_refused_before_it_expands(saved, tmp_path):
    """A deflated member (a zip bomb: 8 GB of zeros fit in a few MB) is refused unread; the
    checkpoints wse-mini writes are uncompressed, so they can hold no more than the file."""
    path = tmp_path / "bomb.npz"
    with zipfile.ZipFile(saved) as src, zipfile.ZipFile(path, "w") as dst:
        for info in src.infolist():
            compress = zipfile.ZIP_DEFLATED if info.filename == "fc0/W.npy" else info.compress_type
            dst.writestr(info.filename, src.read(info), compress_type=compress)
    text = _refused(path, "fc0/W")
    assert "is compressed; only uncompressed archives (numpy.savez) are read here" in text


def test_a_member_of_objects_is_refused(saved, tmp_path):
    data = io.BytesIO()
    np.save(data, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    path = _replace_member(saved, tmp_path, "fc0/b.npy", data.getvalue())
    _refused(path, "[fc0/b] holds object values; only numbers are accepted")


# -- well hashed, wrong -------------------------------------------------------------------------

def _set(field, value):
    def change(meta):
        meta["extra"][field] = value
    return change


@pytest.mark.parametrize("change, message", [
    (_set("step", -1), "step must be an integer of at least 0, not -1"),
    (_set("step", 7), "is at step 7, beyond this run's 6 steps: resume with the steps or epochs"),
    (_set("step", 2.0), "step must be an integer of at least 0, not 2.0"),
    (_set("step", "3"), "step must be an integer of at least 0, not '3'"),
    (_set("step", True), "step must be an integer of at least 0, not True"),
    (_set("step", 2), "step 2 does not match its optimizer step count t = 3"),
    (_set("history", {}), "history must be a list, not {}"),
    (lambda m: m["extra"]["history"].pop(), "history must hold one record per step (3), not 2"),
    (lambda m: m["extra"]["history"][1].update(loss=float("nan")),
     "history[1].loss must be a finite number at least 0.0, not nan"),
    (lambda m: m["extra"]["history"][0].update(accuracy="high"),
     "history[0].accuracy must be a finite number at least 0.0 and at most 1.0, not 'high'"),
    (lambda m: m["extra"]["history"][2].update(step=5),
     "history[2].step must be an integer in 2..2, not 5"),
    (lambda m: m["extra"]["history"][0].pop("mesh_cycles"), "history[0] must be a table of"),
    (_set("evaluations", [{"step": 9, "test_accuracy": 0.5}]),
     "evaluations[0].step must be an integer in 1..3, not 9"),
    (_set("counts", {"gradient_overflows": 0, "mesh_overflows": -2, "mismatches": 0}),
     "counts.mesh_overflows must be an integer of at least 0, not -2"),
    (_set("counts", {"gradients_beyond_32_bits": 0, "mesh_overflows": -2}),  # before issue 13
     "counts.mesh_overflows must be an integer of at least 0, not -2"),
    (_set("counts", [0, 0]),
     "counts must be a table of gradient_overflows, mesh_overflows, mismatches"),
    (lambda m: m["extra"]["history"][1]["cycles_by_pass"].pop("gradient"),
     "history[1].cycles_by_pass must be a table of forward, delta, gradient"),
    (lambda m: m["extra"]["history"][0]["dense_cycles_by_pass"].update(delta=-1),
     "history[0].dense_cycles_by_pass.delta must be an integer of at least 0, not -1"),
    (_set("golden_checks", None), "golden_checks must be an integer of at least 0, not None"),
    (_set("link_bytes", {"broadcast": 1.5, "reduce": 0}),
     "link_bytes.broadcast must be an integer of at least 0, not 1.5"),
    (lambda m: m["extra"].pop("data"), "does not record its data settings (seed, batch)"),
    (lambda m: m["extra"]["data"].update(seed="0"), "data.seed must be an integer, not '0'"),
    (lambda m: m.update(extra=None), "holds no training run"),
    (lambda m: m["memoryx"].update(t=-3),
     "its optimizer step count t must be an integer of at least 0, not -3"),
    (lambda m: m["memoryx"]["rng"]["state"].update(state=-1),
     "has no valid mask generator state"),
    (lambda m: m["memoryx"]["rng"]["state"].update(inc=2.5), "has no valid mask generator state"),
    (lambda m: m["memoryx"].update(t=3.5),
     "its optimizer step count t must be an integer of at least 0, not 3.5"),
])
def test_wrong_metadata_is_named_and_changes_nothing(saved, tmp_path, change, message):
    _refused(_rewritten(saved, tmp_path, change_meta=change), message)


def _poke(name, value, where=(0, 0)):
    def change(arrays):
        arrays[name] = arrays[name].copy()
        arrays[name][where] = value
    return change


def _first_dead(saved):
    _, arrays = checkpoint.load(saved)
    return tuple(int(i) for i in np.argwhere(~arrays["fc0/mask"])[0])


@pytest.mark.parametrize("name, value, message", [
    ("fc0/W", np.nan, "fc0/W holds nan at [0, 0]"),
    ("fc1/b", np.inf, "fc1/b holds inf at [0]"),
    ("fc0/W.exp_avg", -np.inf, "fc0/W.exp_avg holds -inf at [0, 0]"),
    ("fc1/W.exp_avg_sq", -1.0, "fc1/W.exp_avg_sq holds negative values"),
])
def test_non_finite_state_is_refused(saved, tmp_path, name, value, message):
    where = (0,) if name.endswith("/b") else (0, 0)
    path = _rewritten(saved, tmp_path, change_arrays=_poke(name, value, where))
    _refused(path, message)


def test_a_weight_outside_the_mask_is_refused(saved, tmp_path):
    path = _rewritten(saved, tmp_path, change_arrays=_poke("fc0/W", 0.5, _first_dead(saved)))
    _refused(path, "fc0/W is not zero outside the layer's mask")


# -- the number format --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def saved_bf16(tmp_path_factory):
    """A bf16 checkpoint after 3 of 6 steps."""
    path = tmp_path_factory.mktemp("ckpt") / "bf16.npz"
    with Trainer(TrainSettings(**SETTINGS, format="bf16")) as trainer:
        for _ in range(3):
            trainer.step()
        trainer.save(path)
    return path


def test_a_resume_in_another_format_is_refused_naming_both(saved, saved_bf16):
    _refused(saved_bf16, "checkpoint " + str(saved_bf16) + " was trained in bf16, this run is "
                         "in int16: resume with --format bf16")
    _refused(saved, "was trained in int16, this run is in bf16: resume with --format int16",
             format="bf16")


def test_the_checkpoint_records_its_format(saved, saved_bf16):
    """int16's record is the fixed point's fields, as before bf16; bf16's names it."""
    assert checkpoint.load(saved)[0]["memoryx"]["fmt"] == {"width": 16, "frac_bits": 8,
                                                            "acc_width": 32}
    assert checkpoint.load(saved_bf16)[0]["memoryx"]["fmt"] == {"name": "bf16"}


@pytest.mark.parametrize("change", [lambda m: m["memoryx"].pop("fmt"),
                                    lambda m: m["memoryx"]["fmt"].update(name="fixed")])
def test_a_checkpoint_without_a_format_name_is_int16(saved, tmp_path, change):
    path = _rewritten(saved, tmp_path, change_meta=change)
    with Trainer(TrainSettings(**SETTINGS), resume=path) as trainer:
        assert trainer.step_index == 3
    _refused(path, "was trained in int16, this run is in bf16", format="bf16")


@pytest.mark.parametrize("fmt, message", [
    ({"name": "fp8"}, "records no valid number format: number format must be one of int16, bf16"),
    ({"width": "16"}, "records no valid number format: Operand width must be an integer"),
])
def test_a_bad_format_record_is_refused(saved, tmp_path, fmt, message):
    path = _rewritten(saved, tmp_path, change_meta=lambda m: m["memoryx"].update(fmt=fmt))
    _refused(path, message)


def test_a_bf16_checkpoint_resumes_exactly(saved_bf16):
    with Trainer(TrainSettings(**SETTINGS, format="bf16")) as straight:
        want = straight.run()
    with Trainer(TrainSettings(**SETTINGS, format="bf16"), resume=saved_bf16) as resumed:
        got = resumed.run()
    assert got["weights_digest"] == want["weights_digest"] and got["format"] == "bf16"
    assert got["history"] == want["history"]


# -- other data ---------------------------------------------------------------------------------

@pytest.mark.parametrize("setting, value, message", [
    ("seed", 1, "was trained with seed 0, this run has seed 1: resume with --seed 0"),
    ("batch", 12, "was trained with batch 16, this run has batch 12: resume with --batch 16"),
])
def test_a_resume_on_other_data_settings_is_refused(saved, setting, value, message):
    _refused(saved, message, **{setting: value})


def test_the_checkpoint_records_its_data_settings(saved):
    meta, _ = checkpoint.load(saved)
    assert meta["extra"]["data"] == {"seed": 0, "batch": 16}
    json.dumps(meta)


def test_a_good_checkpoint_still_resumes_exactly(saved):
    with Trainer(TrainSettings(**SETTINGS)) as straight:
        want = straight.run()
    with Trainer(TrainSettings(**SETTINGS)) as resumed:
        resumed.resume(saved)
        got = resumed.run()
    assert got["weights_digest"] == want["weights_digest"]
    assert got["history"] == want["history"]


def test_a_refused_checkpoint_starts_no_system(saved, monkeypatch):
    """``Trainer(settings, resume=path)`` (what ``wse train --resume`` does) checks the
    checkpoint before SwarmX starts its systems: a simulator build or a Ray cluster is long work
    to waste on a checkpoint that is then refused."""
    def no_swarm(*args, **kwargs):
        raise AssertionError("SwarmX started before the checkpoint was checked")

    monkeypatch.setattr("wse.host.train.SwarmX", no_swarm)
    with pytest.raises(CheckpointError, match="was trained with seed 0, this run has seed 1"):
        Trainer(TrainSettings(**(SETTINGS | {"seed": 1})), resume=saved)


def test_resume_at_construction_equals_resume_after(saved):
    with Trainer(TrainSettings(**SETTINGS)) as later:
        later.resume(saved)
        want = later.run()
    with Trainer(TrainSettings(**SETTINGS), resume=saved) as early:
        got = early.run()
    assert got["weights_digest"] == want["weights_digest"]
    assert got["history"] == want["history"] and got["swarmx"] == want["swarmx"]
