"""The formal checks (``tests/formal``, ``make formal``, ``docs/formal.md``) under pytest.

The k-induction proofs of the FIFOs and round robins, their covers and their mutations take a
few seconds each and run in the default suite; the bounded checks of the route state, the
router input and the router, their covers and mutations (seconds to six minutes each on a
2-core machine: ``make formal`` as a whole takes longer than CI's three minutes) run under
``make regress``.
"""

import shutil

import pytest

from tests.formal.checks import CHECKS, COVERS, MUTATIONS, module_for, mutation_run
from tests.formal.sby import run

pytestmark = pytest.mark.skipif(
    shutil.which("yowasp-sby") is None or shutil.which("yices-smt2") is None,
    reason="yowasp-sby or yices-smt2 missing: run `make install`")

ROUTER_PARTS = ("route_state", "router_input", "router")
BY_NAME = {check.name: check for check in CHECKS}


def _param(item, module):
    marks = [pytest.mark.slow] if module in ROUTER_PARTS else []
    return pytest.param(item, id=item.name, marks=marks)


@pytest.mark.parametrize("check", [_param(c, c.module) for c in CHECKS + COVERS])
def test_check(check, tmp_path, figure):
    result = run(check.build(module_for(check)), check.name, mode=check.mode, depth=check.depth,
                 work=tmp_path, timeout=900, **check.options)
    figure(f"formal {check.name}: {check.mode} depth {check.depth}, {result.seconds:.1f} s")
    assert result.passed, f"{check.name}: {result.status}\n{result.log[-4000:]}"


@pytest.mark.parametrize("mutation", [_param(m, BY_NAME[m.check].module) for m in MUTATIONS])
def test_mutation_caught(mutation, tmp_path):
    check = BY_NAME[mutation.check]
    spec, mode, depth = mutation_run(check, mutation)
    result = run(spec, mutation.name, mode=mode, depth=depth, work=tmp_path, timeout=900,
                 **check.options)
    assert result.status == "FAIL", f"{mutation.name} not caught by {check.name}: " \
                                    f"{result.status}\n{result.log[-4000:]}"


def test_mutation_text_must_match():
    from tests.formal.sby import mutant
    with pytest.raises(ValueError, match="mutation text must occur once in arbiter.py, not 0"):
        mutant("arbiter", {"no such text": ""})
