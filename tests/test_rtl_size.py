"""Hardware a reader can take in: no function in ``rtl/`` over 120 lines, and no ``elaborate``
anywhere else (the mesh, the board tops, the bridge) over 120 lines either. A longer one is
split into components with their own ports (``docs/router.md``, ``docs/pe.md``: the parts).

Read from the source with :mod:`ast`: the test needs no import to succeed.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: The longest a function may be, in lines from its ``def`` to its last line (docstring and
#: comments included).
MAX_LINES = 120


def _functions(paths, only=None, root=ROOT):
    """``(where, lines)`` of every function (or every one named ``only``) in ``paths``."""
    for path in paths:
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if only is None or node.name == only:
                    yield (f"{path.relative_to(root)}:{node.lineno} {node.name}",
                       node.end_lineno - node.lineno + 1)


def _too_long(functions):
    return sorted(f"{where} ({lines} lines)" for where, lines in functions if lines > MAX_LINES)


def test_no_function_in_rtl_is_over_120_lines():
    long = _too_long(_functions(sorted((ROOT / "rtl").glob("*.py"))))
    assert not long, f"functions in rtl/ over {MAX_LINES} lines (split them): {long}"


def test_no_elaborate_elsewhere_is_over_120_lines():
    paths = [p for folder in ("fabric", "fpga") for p in sorted((ROOT / folder).rglob("*.py"))]
    long = _too_long(_functions(paths, only="elaborate"))
    assert not long, f"elaborate methods over {MAX_LINES} lines (split them): {long}"


def test_the_check_sees_a_long_function(tmp_path):
    """The scan flags a function one line over the limit, and passes one at the limit."""
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES - 1))
    path = tmp_path / "long.py"
    method = "\n".join("    " + line for line in body.splitlines())
    path.write_text(f"def at_limit():\n{body}\n\n\nclass A:\n    def over(self):\n{method}\n"
                    "        y = 0\n")
    found = dict(_functions([path], root=tmp_path))
    assert found == {"long.py:1 at_limit": MAX_LINES, "long.py:124 over": MAX_LINES + 1}
    assert _too_long(found.items()) == [f"long.py:124 over ({MAX_LINES + 1} lines)"]
