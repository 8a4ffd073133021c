"""MemoryX's optimizers against the update rules torch.optim publishes, in float32."""

import numpy as np
import pytest

from wse.host.optim import OPTIMIZERS, SGD, Adam, AdamW, make_optimizer

STEPS = 6


def _problem(seed=0, shape=(5, 7)):
    rng = np.random.default_rng(seed)
    p0 = rng.normal(size=shape).astype(np.float32)
    grads = [rng.normal(size=shape).astype(np.float32) for _ in range(STEPS)]
    return p0, grads


def _run(opt, p0, grads, mask=None):
    p = p0.copy()
    state = {k: np.zeros(s, dtype=np.float32) for k, s in opt.state_shapes(p.shape).items()}
    for t, g in enumerate(grads, start=1):
        opt.step(p, g, state, t, mask=mask)
    return p


def ref_sgd(p0, grads, lr, momentum, dampening, wd, nesterov):
    """torch.optim.SGD's documented algorithm, one element array at a time, in float32."""
    p, b = p0.copy(), None
    for t, g in enumerate(grads, start=1):
        g = g.copy()
        if wd:
            g = g + np.float32(wd) * p
        if momentum:
            b = g.copy() if t == 1 else np.float32(momentum) * b + np.float32(1 - dampening) * g
            g = g + np.float32(momentum) * b if nesterov else b
        p = p - np.float32(lr) * g
    return p


def ref_adam(p0, grads, lr, betas, eps, wd, decoupled):
    """torch.optim.Adam / AdamW's documented algorithm (amsgrad off), in float32."""
    b1, b2 = betas
    p = p0.copy()
    m = np.zeros_like(p)
    v = np.zeros_like(p)
    for t, g in enumerate(grads, start=1):
        if wd and decoupled:
            p = p * np.float32(1 - lr * wd)
        elif wd:
            g = g + np.float32(wd) * p
        m = np.float32(b1) * m + np.float32(1 - b1) * g
        v = np.float32(b2) * v + np.float32(1 - b2) * g * g
        m_hat = m / np.float32(1 - b1 ** t)
        v_hat = v / np.float32(1 - b2 ** t)
        p = p - np.float32(lr) * m_hat / (np.sqrt(v_hat) + np.float32(eps))
    return p


@pytest.mark.parametrize("momentum, dampening, wd, nesterov", [
    (0.0, 0.0, 0.0, False), (0.9, 0.0, 0.0, False), (0.9, 0.1, 1e-2, False),
    (0.9, 0.0, 1e-3, True)])
def test_sgd_matches_torch_rule(momentum, dampening, wd, nesterov):
    p0, grads = _problem()
    opt = SGD(0.05, momentum=momentum, dampening=dampening, weight_decay=wd, nesterov=nesterov)
    got = _run(opt, p0, grads)
    want = ref_sgd(p0, grads, 0.05, momentum, dampening, wd, nesterov)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert got.dtype == np.float32


@pytest.mark.parametrize("cls, wd", [(Adam, 0.0), (Adam, 1e-2), (AdamW, 1e-2), (AdamW, 0.0)])
def test_adam_family_matches_torch_rule(cls, wd):
    p0, grads = _problem(1)
    opt = cls(1e-2, betas=(0.8, 0.99), eps=1e-8, weight_decay=wd)
    got = _run(opt, p0, grads)
    want = ref_adam(p0, grads, 1e-2, (0.8, 0.99), 1e-8, wd, decoupled=cls is AdamW)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)
    assert not np.allclose(got, p0)


@pytest.mark.parametrize("name", ["sgd", "adam", "adamw"])
def test_updates_touch_only_the_mask(name):
    p0, grads = _problem(2)
    mask = np.random.default_rng(3).random(p0.shape) < 0.3
    hyper = {"momentum": 0.9, "weight_decay": 0.1} if name == "sgd" else {"weight_decay": 0.1}
    opt = make_optimizer(name, lr=0.1, **hyper)
    p = p0.copy()
    state = {k: np.zeros(s, dtype=np.float32) for k, s in opt.state_shapes(p.shape).items()}
    for t, g in enumerate(grads, start=1):
        opt.step(p, g, state, t, mask=mask)
    assert np.array_equal(p[~mask], p0[~mask])
    for a in state.values():
        assert not a[~mask].any()
    # inside the mask, exactly what an unmasked run gives on those elements
    full = _run(make_optimizer(name, lr=0.1, **hyper), p0, grads)
    np.testing.assert_array_equal(p[mask], full[mask])


@pytest.mark.parametrize("make, message", [
    (lambda: SGD(-1.0), "lr must be a finite number at least 0.0, not -1.0"),
    (lambda: SGD(0.1, nesterov=True), "nesterov needs a momentum above 0"),
    (lambda: Adam(1e-3, betas=(1.0, 0.9)),
     "betas[0] must be a finite number at least 0.0 and below 1.0, not 1.0"),
    (lambda: Adam(float("nan")), "lr must be a finite number at least 0.0, not nan"),
    (lambda: SGD(0.1, momentum=True), "momentum must be a finite number at least 0.0, not True"),
    (lambda: make_optimizer("lamb", lr=1.0), "optimizer must be one of sgd, adam, adamw"),
    (lambda: make_optimizer("sgd", lr=1.0, betas=(0.9, 0.9)), "sgd: "),
])
def test_bad_hyperparameters_are_named(make, message):
    with pytest.raises(ValueError) as info:
        make()
    assert message in str(info.value)


def test_gradient_shape_and_step_are_checked():
    opt = SGD(0.1)
    p = np.zeros((2, 2), dtype=np.float32)
    with pytest.raises(ValueError, match=r"gradient shape \(3,\) does not match"):
        opt.step(p, np.zeros(3), {}, 1)
    with pytest.raises(ValueError, match="t must be a step number from 1"):
        opt.step(p, np.zeros((2, 2)), {}, 0)


def test_the_registry_is_what_make_optimizer_offers():
    assert list(OPTIMIZERS) == ["sgd", "adam", "adamw"]
    for name, cls in OPTIMIZERS.items():
        assert type(make_optimizer(name, lr=0.1)) is cls and cls.name == name
