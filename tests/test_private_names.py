"""Private names stay private, read from the source (no import, no run):

- no module of the project imports a ``_name`` from another of its modules (``from
  wse.runtime.simulator import _reply``, ``from .test_train import _helper``): what one module
  needs of another is public, documented, and in the other's ``__all__`` when it has one;
- no test touches ``x._name`` of an object of another module (``worker._gemm``,
  ``swarm._leaves``, ``program._W``): a test reads what a user can, or the interface grows a
  small documented property for it. A test's own classes use their own ``self._name``, and a
  test's subclass of a backend implements and calls the backend hook ``_exchange`` through
  ``self`` and ``super()``.

Third-party internals are outside this check: the formal specs (``tests/formal/sby.py``) read
what Amaranth elaborated (a module's statements and submodules, which Amaranth keeps private),
and :mod:`host.swarm_ray` starts a loopback Ray through ``ray._private``.
"""

import ast
import pathlib
import tomllib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
#: The installed folders (``pyproject.toml``'s ``package-dir``) and the tests.
FOLDERS = (*tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
           ["package-dir"].values(), "tests")
#: Files whose private accesses are of a third-party library's objects (see above).
THIRD_PARTY_INTERNALS = {"tests/formal/sby.py"}


def _private(name):
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _sources():
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), ast.parse(path.read_text(), str(path))


def _own_module(node):
    """Whether an ``ImportFrom`` names one of the project's modules."""
    if node.level:
        return True
    first = (node.module or "").split(".")[0]
    return first in ("wse", "tests") or first in FOLDERS


def private_imports(tree):
    """``(line, text)`` of every import of a private name from another project module."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and _own_module(node):
            module = "." * node.level + (node.module or "")
            if any(_private(part) for part in (node.module or "").split(".")):
                found.append((node.lineno, f"from {module} import ..."))
            found += [(node.lineno, f"from {module} import {alias.name}")
                      for alias in node.names if _private(alias.name)]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, f"import {alias.name}") for alias in node.names
                      if alias.name.split(".")[0] == "wse"
                      and any(_private(part) for part in alias.name.split("."))]
    return found


def _is_own(value):
    """``self``, ``cls`` or ``super()``: the test's own object."""
    if isinstance(value, ast.Name):
        return value.id in ("self", "cls")
    return (isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
            and value.func.id == "super")


def _named(node):
    """The private name a ``getattr`` / ``setattr`` / ``monkeypatch.setattr`` call reaches by a
    string (``(obj, "_name")`` or ``("module._name", value)``), if any."""
    func = node.func
    name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
    if name not in ("getattr", "setattr", "hasattr", "delattr") or not node.args:
        return None
    if len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) \
            and isinstance(node.args[1].value, str) and _private(node.args[1].value) \
            and not _is_own(node.args[0]):
        return f"{ast.unparse(node.args[0])}.{node.args[1].value}"
    first = node.args[0]
    if isinstance(first, ast.Constant) and isinstance(first.value, str) \
            and any(_private(part) for part in first.value.split(".")):
        return first.value
    return None


def private_attributes(tree):
    """``(line, text)`` of every ``x._name`` where ``x`` is not the test's own object, and of
    every such name reached through ``getattr``, ``setattr`` or ``monkeypatch.setattr``."""
    found = [(node.lineno, f"{ast.unparse(node.value)}.{node.attr}") for node in ast.walk(tree)
             if isinstance(node, ast.Attribute) and _private(node.attr)
             and not _is_own(node.value)]
    return found + [(node.lineno, _named(node)) for node in ast.walk(tree)
                    if isinstance(node, ast.Call) and _named(node)]


def test_no_module_imports_another_modules_private_name():
    found = [f"{path}:{line}: {text}" for path, tree in _sources()
             for line, text in private_imports(tree)]
    assert not found, "private names imported from another module:\n" + "\n".join(found)


def test_no_test_touches_a_private_attribute_of_another_module():
    found = [f"{path}:{line}: {text}" for path, tree in _sources()
             if path.startswith("tests/") and path not in THIRD_PARTY_INTERNALS
             for line, text in private_attributes(tree)]
    assert not found, "tests touching private attributes:\n" + "\n".join(found)


@pytest.mark.parametrize("source, imports, attributes", [
    ("from wse.runtime.simulator import _reply", 1, 0),
    ("from .test_train import _two_steps, check", 1, 0),
    ("from wse.host._hidden import thing", 1, 0),
    ("import wse.host._hidden", 1, 0),
    ("from ray._private import ray_constants", 0, 0),
    ("from wse.host.swarmx import SwarmX, __all__", 0, 0),
    ("worker._gemm(W, X)", 0, 1),
    ("trainer.swarm._leaves.workers", 0, 1),
    ("self._log.append(1); super()._exchange(s); cls._cache", 0, 0),
    ("system.__class__; system.exchange(s)", 0, 0),
    ("monkeypatch.setattr(compiled, '_FLAGS', []); getattr(w, '_gemm')", 0, 2),
    ("monkeypatch.setattr('wse.sim.compiled._FLAGS', []); setattr(self, '_x', 1)", 0, 1),
    ("monkeypatch.setattr(compiled, 'FLAGS', []); getattr(w, 'gemm')", 0, 0),
])
def test_the_checks_find_what_they_must(source, imports, attributes):
    tree = ast.parse(source)
    assert (len(private_imports(tree)), len(private_attributes(tree))) == (imports, attributes)
