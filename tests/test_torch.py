"""wse.torch: what it refuses and how, the weights it gives back, and the module on the CPU
against the mesh (docs/torch.md)."""

import contextlib
import copy
import importlib.util
import io
import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import wse.torch as wtorch  # noqa: E402
from wse.host.train import load_digits_split  # noqa: E402
from wse.torch.bounds import logit_bound  # noqa: E402
from wse.torch.optim import hyperparameters  # noqa: E402

CHAIN = "wse.torch maps a chain of Linear layers with a ReLU between each two"
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "torch_digits.py"


def _example(*argv):
    """``examples/torch_digits.py``'s JSON object for ``argv``."""
    spec = importlib.util.spec_from_file_location("torch_digits", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = module.main([*argv, "--json"])
    report = json.loads(out.getvalue())
    assert status == (1 if report["mismatches"] else 0)
    return report


def _digits(n=96):
    x, y, xt, yt = load_digits_split(0)
    return (torch.tensor(x[:n], dtype=torch.float32), torch.tensor(y[:n]),
            torch.tensor(xt, dtype=torch.float32), torch.tensor(yt))


def _mlp(seed=0, hidden=32):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))


def _stepper(compiled, optimizer, loss_fn=F.cross_entropy):
    @wtorch.trace
    def step(x, y):
        loss = loss_fn(compiled(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return loss
    return step


# -- refusals, before anything runs -----------------------------------------------------------

class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(8, 8), nn.Linear(8, 2)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)) + x)


class Tanh(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(8, 8), nn.Linear(8, 2)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)

    def forward(self, x):
        return self.norm(self.fc(x))


@pytest.mark.parametrize("make, message", [
    (lambda: nn.Sequential(nn.Conv2d(1, 4, 3), nn.Flatten(), nn.Linear(36, 2)),
     f"0 (torch.nn.Conv2d) cannot run on the mesh: {CHAIN}"),
    (lambda: nn.Sequential(Block(), nn.ReLU(), nn.Linear(8, 2)),
     f"0.norm (torch.nn.LayerNorm) cannot run on the mesh: {CHAIN}"),
    (Tanh, f"torch.tanh (called as tanh) cannot run on the mesh: {CHAIN}"),
    (Residual, f"a residual add (add: relu + x) cannot run on the mesh: {CHAIN}"),
    (lambda: nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 2)),
     f"1 (torch.nn.Linear) cannot run on the mesh: it follows 0 without a ReLU between them; "
     f"{CHAIN}"),
    (lambda: nn.Sequential(nn.Linear(8, 2), nn.ReLU()),
     "0 (torch.nn.Linear) is followed by a ReLU: the last Linear's output must be the logits, "
     "returned as they are"),
])
def test_a_layer_that_does_not_map_is_named_in_one_line(make, message):
    with pytest.raises(wtorch.UnsupportedError) as error:
        wtorch.compile(make(), wtorch.backend("golden"))
    assert str(error.value) == message


def test_what_maps():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b, self.c = nn.Linear(64, 16, bias=False), nn.Linear(16, 8), \
                nn.Linear(8, 3)

        def forward(self, x):
            x = torch.flatten(x, 1)
            return self.c(self.b(self.a(x).relu()).relu())

    compiled = wtorch.compile(Net(), wtorch.backend("golden"))
    assert [(layer.path, layer.name, layer.bias) for layer in compiled.layers] == [
        ("a", "a", False), ("b", "b", True), ("c", "c", True)]


@pytest.mark.parametrize("make, message", [
    (lambda p: wtorch.optim.Adam(p, amsgrad=True),
     "Adam(amsgrad=True) is not supported: MemoryX's adam rule has amsgrad=False"),
    (lambda p: wtorch.optim.AdamW(p, maximize=True),
     "AdamW(maximize=True) is not supported: MemoryX's adamw rule has maximize=False"),
    (lambda p: torch.optim.RMSprop(p),
     "optimizer torch.optim.RMSprop is not supported: use torch.optim.SGD, Adam or AdamW"),
    (lambda p: wtorch.optim.SGD([{"params": [p[0]], "lr": 0.1}, {"params": [p[1]], "lr": 0.2}]),
     "SGD: parameter group 1 has another lr (0.2, group 0: 0.1); MemoryX takes one set of "
     "hyperparameters for the whole model"),
])
def test_an_optimizer_option_it_cannot_honour_is_named(make, message):
    with pytest.raises(wtorch.UnsupportedError) as error:
        hyperparameters(make(list(nn.Linear(4, 2).parameters())))
    assert str(error.value) == message


def test_a_plain_torch_optimizer_is_refused_at_the_first_step():
    x, y, _, _ = _digits(32)
    model = _mlp()
    compiled = wtorch.compile(model, wtorch.backend("golden"))
    step = _stepper(compiled, torch.optim.Adam(model.parameters()))
    with pytest.raises(wtorch.UnsupportedError, match="no wse.torch.optim optimizer holds the "
                                                      "model's parameters"):
        step(x, y)


def test_another_loss_is_refused_before_anything_changes():
    x, y, _, _ = _digits(32)
    model = _mlp()
    before = copy.deepcopy(model.state_dict())
    compiled = wtorch.compile(model, wtorch.backend("golden"))
    optimizer = wtorch.optim.SGD(model.parameters(), lr=0.1)
    step = _stepper(compiled, optimizer,
                    lambda logits, y: F.mse_loss(logits, F.one_hot(y, 10).float()))
    with pytest.raises(wtorch.UnsupportedError, match="the loss is not the softmax "
                                                      "cross-entropy"):
        step(x, y)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    compiled.close()


@pytest.mark.parametrize("config, message", [
    ({"algorithm": "rigl", "sparsity": 0.9}, "sparsity algorithm 'rigl' is not supported"),
    ({"algorithm": "gmp", "sparsity": 0.9, "schedule": {}}, "sparsity config: unknown key "
                                                            "'schedule'"),
    ({"algorithm": "static", "sparsity": 1.0}, r"sparsity must be a number in \[0, 1\)"),
])
def test_a_sparsity_config_is_checked(config, message):
    with pytest.raises(wtorch.UnsupportedError, match=message):
        wtorch.sparse.configure(config)


def test_a_filter_matching_a_bias_is_refused():
    model = _mlp()
    model.apply(wtorch.sparse.configure({"algorithm": "static", "sparsity": 0.5,
                                         "param_filter": "0.*"}))
    compiled = wtorch.compile(model, wtorch.backend("golden"))
    x, y, _, _ = _digits(32)
    step = _stepper(compiled, wtorch.optim.SGD(model.parameters(), lr=0.1))
    with pytest.raises(wtorch.UnsupportedError, match="matches '0.bias', which is not a Linear "
                                                      "layer's weight"):
        step(x, y)


# -- weights back -----------------------------------------------------------------------------

def test_parameters_hold_the_trained_weights_and_round_trip(tmp_path):
    """After each step the module's parameters are MemoryX's masters (zero outside the mask);
    ``torch.save`` of the state dict loads into a fresh module that predicts as the trained one;
    a state dict loaded into the compiled model is what the mesh runs next."""
    x, y, x_test, _ = _digits()
    model = _mlp()
    model.apply(wtorch.sparse.configure({"algorithm": "static", "sparsity": 0.5,
                                         "param_filter": "0.weight"}))
    compiled = wtorch.compile(model, wtorch.backend("golden"))
    optimizer = wtorch.optim.Adam(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    step = _stepper(compiled, optimizer)
    step(x[:32], y[:32])
    scheduler.step()
    step(x[32:64], y[32:64])
    assert compiled.engine.memoryx.optimizer.lr == pytest.approx(0.005)
    for layer in compiled.layers:
        W, b = compiled.engine.weights(layer.name)
        assert np.array_equal(layer.module.weight.detach().numpy(), W)
        assert np.array_equal(layer.module.bias.detach().numpy(), b)
    assert (model[0].weight == 0).float().mean() == pytest.approx(0.5, abs=1 / 2048)
    path = tmp_path / "trained.pt"
    torch.save(model.state_dict(), path)
    mesh_logits = compiled(x_test)

    fresh = _mlp(seed=1)
    fresh.load_state_dict(torch.load(path))
    with torch.no_grad():
        assert torch.equal(fresh(x_test), model(x_test))

    step(x[64:], y[64:])                            # the mesh moves on ...
    assert not torch.equal(compiled(x_test), mesh_logits)
    model.load_state_dict(torch.load(path))         # ... and is given the saved weights back
    assert torch.equal(compiled(x_test), mesh_logits)
    compiled.close()


def test_evaluation_before_training_needs_no_optimizer():
    """The mesh's forward pass of an untrained module, then training from it."""
    x, y, x_test, _ = _digits(32)
    model = _mlp()
    compiled = wtorch.compile(model, wtorch.backend("golden"))
    logits = compiled(x_test)
    _, bound, _ = logit_bound(compiled, x_test)
    assert (np.abs(logits.numpy() - model(x_test).detach().numpy()) <= bound).all()
    _stepper(compiled, wtorch.optim.SGD(model.parameters(), lr=0.1))(x, y)
    assert compiled.summary()["steps"] == 1
    compiled.close()


@pytest.mark.parametrize("fmt", ["int16", "bf16"])
def test_the_module_on_the_cpu_predicts_what_the_mesh_predicts(fmt):
    """The mesh's logits lie within :func:`logit_bound` of the module's own in PyTorch, and
    wherever that bound separates a sample's top logit the mesh predicts the same class."""
    x, y, x_test, _ = _digits(160)
    model = _mlp(hidden=48)
    compiled = wtorch.compile(model, wtorch.backend("golden", format=fmt))
    step = _stepper(compiled, wtorch.optim.Adam(model.parameters(), lr=0.01))
    for k in range(0, 160, 32):
        step(x[k:k + 32], y[k:k + 32])
    mesh = compiled(x_test).numpy().astype(np.float64)
    cpu, bound, guaranteed = logit_bound(compiled, x_test)
    assert (np.abs(mesh - cpu) <= bound).all()
    assert guaranteed.mean() > 0.3
    assert (mesh.argmax(1) == cpu.argmax(1))[guaranteed].all()
    compiled.close()


def test_one_and_two_systems_train_the_same_weights():
    """int16: the same weights whatever the number of systems, as ``wse train``."""
    x, y, _, _ = _digits()
    digests = []
    for systems in (1, 2):
        model = _mlp()
        model.apply(wtorch.sparse.configure({"algorithm": "gmp", "sparsity": 0.8,
                                             "param_filter": "0.weight", "end": 2}))
        compiled = wtorch.compile(model, wtorch.backend("golden", systems=systems))
        step = _stepper(compiled, wtorch.optim.AdamW(model.parameters(), lr=0.01))
        for k in range(0, 96, 32):
            step(x[k:k + 32], y[k:k + 32])
        digests.append(compiled.summary()["weights_digest"])
        compiled.close()
    assert digests[0] == digests[1]


def test_the_cpu_backend_draws_the_meshs_masks():
    """A static mask on the cpu backend is the one MemoryX draws (same generator and order)."""
    x, y, _, _ = _digits(32)
    zeros = []
    for name in ("cpu", "golden"):
        model = _mlp()
        model.apply(wtorch.sparse.configure({"algorithm": "static", "sparsity": 0.75}))
        compiled = wtorch.compile(model, wtorch.backend(name, seed=3))
        _stepper(compiled, wtorch.optim.SGD(model.parameters(), lr=0.1))(x, y)
        zeros.append([(p == 0).numpy() for n, p in model.named_parameters() if "weight" in n])
        compiled.close()
    assert all(np.array_equal(a, b) for a, b in zip(*zeros))
    assert zeros[0][0].mean() == pytest.approx(0.75, abs=1 / 2048)


def test_the_example_prints_one_json_object():
    report = _example("--steps", "2", "--hidden", "16,16")
    assert {"test_accuracy", "torch_test_accuracy", "steps", "backend",
            "speedup_vs_dense"} <= set(report)
    assert report["steps"] == 2 and report["backend"] == "golden"
    assert report["weight_sparsity"] == pytest.approx(0.9, abs=0.01)


@pytest.mark.slow
def test_three_rtl_steps_equal_the_golden_model():
    """Three steps of the example on Verilator, every mesh result compared with the golden
    model: none differs, and the weights are the golden run's."""
    rtl = _example("--backend", "verilator", "--steps", "3", "--check-golden")
    golden = _example("--steps", "3")
    assert rtl["checked_results"] > 0
    assert rtl["mismatches"] == 0
    assert rtl["weights_digest"] == golden["weights_digest"]
