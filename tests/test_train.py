"""Weight-streaming training on digits: accuracy, determinism over systems and transports,
resume, capacity, and the RTL against golden."""

import json

import numpy as np
import pytest

from wse.fabric.compiler import compile_gemm
from wse.fabric.config import MeshConfig
from wse.fabric.cycle_model import predict_cycles, predict_dense_cycles
from wse.host.train import Trainer, TrainSettings

STEPS = 8


def _train(tmp_path=None, **kwargs):
    settings = TrainSettings(**({"steps": STEPS} | kwargs))
    with Trainer(settings, directory=tmp_path) as trainer:
        return trainer.run()


@pytest.fixture(scope="module")
def reference():
    """One system, in process: the digest the others must reproduce."""
    return _train()


def test_reaches_90_percent_at_90_percent_sparsity():
    report = _train(steps=None, epochs=3)
    print(f"\ndigits 64-64-10, 3 epochs, golden: test accuracy {report['test_accuracy']:.3f}, "
          f"sparsity {report['weight_sparsity']:.3f}, mesh cycles {report['mesh_cycles']} vs "
          f"dense {report['dense_cycles']} ({report['speedup_vs_dense']:.2f}x), "
          f"{report['seconds']} s")
    assert report["test_accuracy"] >= 0.90
    assert report["weight_sparsity"] == pytest.approx(0.9, abs=1e-3)
    assert report["mesh_cycles"] < report["dense_cycles"]


@pytest.mark.parametrize("systems, swarm", [(2, "inproc"), (3, "inproc"), (4, "inproc"),
                                            (2, "process"), (4, "process")])
def test_same_digest_on_any_number_of_systems(reference, systems, swarm):
    report = _train(systems=systems, swarm=swarm)
    assert report["weights_digest"] == reference["weights_digest"]
    assert report["test_accuracy"] == reference["test_accuracy"]
    assert report["swarmx"]["systems"] == systems


@pytest.mark.parametrize("raw", [False, True])
def test_the_dense_figure_is_a_second_compile_without_compiling(raw):
    """``predict_dense_cycles`` of a sparse program is the cycle model of the same GEMM compiled
    with every weight present (what the worker did before, with a second compile)."""
    config = MeshConfig(4, 4)
    rng = np.random.default_rng(int(raw))
    for _ in range(10):
        n_out, n_in = rng.integers(1, 4 * 32 + 1, 2)
        W = rng.integers(-300, 300, (n_out, n_in)) * (rng.random((n_out, n_in)) < rng.random())
        X = rng.integers(-300, 300, (n_in, int(rng.integers(1, 33))))
        X[rng.random(X.shape) < 0.4] = 0
        program = compile_gemm(config, W, X, raw=raw)
        full = compile_gemm(config, np.where(W != 0, W, 1), X, raw=raw)
        assert predict_dense_cycles(program, X) == predict_cycles(full, X)


def test_the_step_time_counts_training_steps_only(reference):
    assert reference["seconds_per_step"] > 0
    assert reference["seconds_per_step"] * reference["steps"] <= reference["seconds"]


# dynamic, batch 300: 4 steps an epoch, so the mask is re-selected at step 9 (the ramp ends at 5)
@pytest.mark.parametrize("prune, batch", [("random", 12), ("dynamic", 300)])
def test_masks_from_the_generator_are_the_same_on_any_split_and_after_resume(tmp_path, prune,
                                                                             batch):
    """Random and re-selected masks come from MemoryX's generator: 1 and 3 systems agree, and a
    resumed run picks the generator up where it stopped."""
    settings = {"steps": 11, "prune": prune, "batch": batch}
    one = _train(**settings)
    three = _train(**settings, systems=3)
    assert one["weights_digest"] == three["weights_digest"]
    with Trainer(TrainSettings(**settings)) as first:
        for _ in range(5):
            first.step()
        first.save(tmp_path / "ckpt.npz")
    with Trainer(TrainSettings(**settings)) as second:
        second.resume(tmp_path / "ckpt.npz")
        assert second.run()["weights_digest"] == one["weights_digest"]


def test_same_digest_on_ray(reference):
    """Three systems as actors of a local Ray that SwarmX starts (on loopback) and stops."""
    import ray
    if ray.is_initialized():
        pytest.skip("a Ray is already running in this process")
    report = _train(systems=3, swarm="ray")
    assert report["weights_digest"] == reference["weights_digest"]
    assert not ray.is_initialized()


def test_resume_continues_exactly(tmp_path, reference):
    half = STEPS // 2
    with Trainer(TrainSettings(steps=STEPS)) as first:
        while first.step_index < half:
            first.step()
        first.save(tmp_path / "ckpt.npz")
    with Trainer(TrainSettings(steps=STEPS)) as second:
        second.resume(tmp_path / "ckpt.npz")
        assert second.step_index == half and len(second.history) == half
        report = second.run()
    assert report["weights_digest"] == reference["weights_digest"]
    assert [r["loss"] for r in report["history"]] == [r["loss"] for r in reference["history"]]


def test_a_model_beyond_memoryx_memory_trains_on_4x4_by_streaming(tmp_path):
    """The cores hold a whole layer's activations for the batch and, for the weight-gradient
    pass, a layer's inputs as tokens (sized from the model), never its weights: a 64-768-768-10
    whose weights and Adam state do not fit MemoryX's 1 MiB memory tier trains on the 4x4 mesh,
    its state spilling to disk. The mesh's SRAM follows the widest layers (its cores' ``X`` and
    ``Y`` are ``n_feat`` or ``n_out`` rows of ``n_tok`` tokens: two layers of 768 activations,
    the loss's deltas and the gradient pass's features at 64 tokens, the gradient pass's 768
    inputs in 3 blocks), not the weights' count."""
    report = _train(tmp_path, steps=2, hidden=(768, 768), memory_bytes=1 << 20)
    assert report["core"] == {"n_feat": 395, "n_out": 192, "n_tok": 64}
    assert report["blocked_layers"] == {} and report["resident_layers"] is True
    print(f"\n64-768-768-10: {report['model_bytes_int16']} bytes of int16 weights, "
          f"{report['mesh_sram_bytes']} bytes of mesh SRAM; MemoryX {report['memoryx']}")
    assert report["model_bytes_int16"] + report["memoryx"]["disk_bytes"] > 1 << 20
    assert report["mesh"] == "4x4" and report["steps"] == 2
    assert np.isfinite(report["final_loss"]) and report["history"][-1]["mesh_cycles"] > 0
    assert report["memoryx"]["spills"] > 0       # 1 MiB cannot hold the weights and Adam state
    assert report["layer_sparsity"]["fc1"] > 0.5


def two_steps(**kwargs):
    """Two training steps (forward, gradient, delta and update; no test-set pass) of a
    64-48-10 model on a batch of 16, with a sparsity schedule that masks from the first step."""
    settings = TrainSettings(steps=2, hidden=(48,), batch=16, **kwargs)
    with Trainer(settings) as trainer:
        trainer.step()
        trainer.step()
        return trainer.report()


@pytest.fixture(scope="module")
def golden_two_steps():
    return two_steps()


def check_rtl_training(rtl, golden, name):
    print(f"\nRTL training, 4x4 {name}: {rtl['checked_results']} mesh results checked, "
          f"{rtl['mismatches']} mismatches; cycles by pass {rtl['cycles_by_pass']} measured, "
          f"{golden['cycles_by_pass']} modelled; dense {rtl['dense_cycles_by_pass']}")
    # per step: forward 2 (fc0, fc1), gradient 2 (both layers' 64 and 48 inputs are the
    # GEMM's tokens, and the cores hold 64: one block each), delta 1
    assert rtl["checked_results"] == 10 and rtl["mismatches"] == 0
    assert rtl["gradient_source"] == "mesh" == golden["gradient_source"]
    assert rtl["weights_digest"] == golden["weights_digest"]
    assert rtl["cycles_source"] == "rtl" and rtl["gradient_overflows"] == 0
    for name in ("forward", "delta", "gradient"):
        measured, model = rtl["cycles_by_pass"][name], golden["cycles_by_pass"][name]
        assert measured > 0 and abs(measured - model) <= 0.1 * model, name
        assert rtl["dense_cycles_by_pass"][name] == golden["dense_cycles_by_pass"][name]
    json.dumps(rtl)


@pytest.mark.xdist_group("compiled")       # the compiled model's 4x4 build
def test_rtl_training_is_the_golden_training(golden_two_steps):
    """The 4x4 mesh on Verilator (the compiled model), every mesh result of every pass checked
    against golden, trains to the same bits as the golden model."""
    rtl = two_steps(backend="verilator", check_golden=True)
    check_rtl_training(rtl, golden_two_steps, "Verilator")


@pytest.mark.slow      # two minutes; the same run on Verilator is in the default suite
def test_rtl_training_on_icarus_is_the_golden_training(golden_two_steps):
    """The same two steps on Icarus (through cocotb)."""
    rtl = two_steps(backend="icarus", check_golden=True)
    check_rtl_training(rtl, golden_two_steps, "Icarus")


def test_the_report_names_the_gradients_source_and_every_passs_figures(reference):
    assert reference["gradient_source"] == "mesh"
    by_pass, dense = reference["cycles_by_pass"], reference["dense_cycles_by_pass"]
    assert set(by_pass) == set(dense) == {"forward", "delta", "gradient"}
    assert sum(by_pass.values()) == reference["mesh_cycles"]
    assert sum(dense.values()) == reference["dense_cycles"]
    assert all(dense[k] >= by_pass[k] > 0 for k in by_pass)
    assert reference["speedup_by_pass"]["gradient"] == dense["gradient"] / by_pass["gradient"]
    assert reference["checked_results"] == 0 and reference["mismatches"] == 0
    assert reference["format"] == reference["settings"]["format"] == "int16"


@pytest.mark.parametrize("kwargs, message", [
    ({"systems": 0}, "systems must be a positive integer"),
    ({"batch": 2, "systems": 3}, "batch (2) must give every one of the 3 systems"),
    ({"swarm": "mpi"}, "swarm must be one of inproc, process, ray"),
    ({"prune": "lottery"}, "prune must be one of gradual, random, dynamic"),
    ({"hidden": ()}, "hidden must be one or more positive layer widths"),
    ({"batch": 5000}, "batch (5000) must not exceed the 1438 training samples"),
    ({"seed": -1}, "seed must be an integer of at least 0, not -1"),
    ({"steps": 0}, "steps must be a positive integer, not 0"),
    ({"sparsity": 1.0}, "sparsity must be a finite number at least 0.0 and below 1.0, not 1.0"),
    ({"memory_bytes": -5}, "memory_bytes must be a non-negative integer, not -5"),
    ({"format": "fp8"}, "format must be one of int16, bf16, not 'fp8'"),
])
def test_bad_settings_are_named(kwargs, message):
    with pytest.raises(ValueError) as info:
        TrainSettings(**kwargs)
    assert message in str(info.value)
