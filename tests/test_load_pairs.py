"""LOAD pairs (``docs/pe.md``, "Commands"): after an ADDR with ``pairs``, a LOAD writes its two
operands, a cycle each, the load pointer stepping over the inactive tokens between them as
between any two words. The core in Amaranth's simulator against the golden model, word for
word and counter for counter, in int16 and bf16."""

import numpy as np
import pytest

from wse.fabric import numerics, pe_model
from wse.rtl.core_params import COUNTER_BASE, COUNTERS, CoreParams
from wse.rtl.numfmt import number_format

from .core_harness import run_core

TIMED = {"stall_cycles"}


def operands(rng, fmt, n, density=0.6):
    values = rng.integers(-3000, 3000, n) * (rng.random(n) < density)
    return numerics.encode(fmt, values / 64.0)[0] if fmt.is_float else values


def check(params, commands, active=None):
    """Run ``commands`` and a READ of the whole ``X`` (its ``active`` tokens a slot, all by
    default) on the RTL core and on the golden model: the same words out and the same
    counters. Returns the model."""
    active = params.n_tok if active is None else active
    commands = [*commands, pe_model.read(params, 0, params.n_feat * active)]
    model = pe_model.CoreModel(params)
    # the harness READs the counters after the commands: the model sees that READ too
    want = model.run([*commands, pe_model.read(params, COUNTER_BASE, len(COUNTERS))])
    got, counters, _ = run_core(params, commands)
    out = params.colors.out
    assert got.get(out, []) == want[out][:-len(COUNTERS)]
    # the counters as the model's READ of them gives them: when that READ starts
    for name, value in zip(COUNTERS, want[out][-len(COUNTERS):]):
        if name not in TIMED:
            assert int(counters[name]) == value, name
    return model


@pytest.mark.parametrize("fmt", ["int16", "bf16"])
def test_pairs_fill_x_as_single_loads_do(fmt):
    """The same words through pairs (an odd one alone first) and through single LOADs give
    the same ``X``; a pair costs two busy cycles, a single one."""
    number = number_format(fmt)
    params = CoreParams(n_feat=3, n_tok=4, n_out=2, lanes=2, fmt=number)
    X = operands(np.random.default_rng(1), number, 12).reshape(3, 4)
    single = check(params, [pe_model.addr(params, 0), *pe_model.load(params, X)])
    paired = check(params, [pe_model.addr(params, 0, pairs=True),
                            *pe_model.load(params, X, pairs=True)])
    np.testing.assert_array_equal(single.x, X)
    np.testing.assert_array_equal(paired.x, X)
    assert paired.counters["busy_cycles"] == single.counters["busy_cycles"]
    assert paired.counters["wavelets_in"] == single.counters["wavelets_in"] - 6


@pytest.mark.parametrize("fmt", ["int16", "bf16"])
def test_a_pair_steps_over_the_inactive_tokens_and_past_x(fmt):
    """With 3 active tokens of 4, a pair that starts at a slot's last active token writes its
    second word at the next slot's first; an odd word alone (ADDR without ``pairs``) between
    pairs; a pair whose second word falls past ``X`` writes its first and counts one error,
    and the pointer goes on."""
    number = number_format(fmt)
    params = CoreParams(n_feat=3, n_tok=4, n_out=2, lanes=2, fmt=number)
    v = operands(np.random.default_rng(2), number, 10, density=1.0)
    model = check(params, [
        pe_model.tokens(params, 3),
        pe_model.addr(params, 2, pairs=True), *pe_model.load(params, v[0:4], pairs=True),
        pe_model.addr(params, 6), *pe_model.load(params, v[4:5]),
        pe_model.addr(params, 10, pairs=True), *pe_model.load(params, v[5:7], pairs=True),
    ], active=3)
    # slot 0 token 2, slot 1 tokens 0 1 2 (pairs); slot 1 token 2 again alone; slot 2 token 2,
    # then past X (an error)
    assert model.x[0, 2] == v[0] and model.x[1, :3].tolist() == [v[1], v[2], v[4]]
    assert model.x[2, 2] == v[5] and model.counters["errors"] == 1


def test_random_streams_of_pairs_and_single_loads():
    """Random ADDRs (with and without ``pairs``), LOADs, TOKENS and a few AXPYs and CRs in
    between, against the golden model (every word of ``X`` read back, every counter)."""
    rng = np.random.default_rng(7)
    for fmt in ("int16", "bf16"):
        number = number_format(fmt)
        params = CoreParams(n_feat=4, n_tok=4, n_out=2, lanes=2, fmt=number)
        commands = []
        for _ in range(30):
            kind = rng.integers(5)
            if kind == 0:
                commands.append(pe_model.addr(params, int(rng.integers(0, 18)),
                                              pairs=bool(rng.integers(2))))
            elif kind == 1:
                commands += pe_model.load(params, operands(rng, number, 2), pairs=True)
            elif kind == 2:
                commands += pe_model.load(params, operands(rng, number, 1))
            elif kind == 3:
                commands.append(pe_model.tokens(params, int(rng.integers(1, 5))))
            else:
                commands += [pe_model.weight(params, operands(rng, number, 1, 1.0)[0],
                                             int(rng.integers(4))),
                             pe_model.cr(params, int(rng.integers(2)))]
        check(params, commands)


def test_pairs_are_checked():
    params = CoreParams(n_feat=2, n_tok=2, n_out=1)
    with pytest.raises(ValueError, match="LOAD pairs take an even number of values, not 3"):
        pe_model.load(params, [1, 2, 3], pairs=True)
    assert COUNTER_BASE > params.n_feat * params.n_tok
