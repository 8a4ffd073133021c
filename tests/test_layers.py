"""The house rules the import graph must keep: each folder imports only the layers below it, and
no module is part of an import circle (lazy imports inside functions count too).

The graph is read from the source with :mod:`ast`, so the test needs no import to succeed.
"""

import ast
import collections
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: What each folder may import, besides itself (docs/layout.md). ``tb`` is the cocotb side of
#: the runtime's socket and uses its framing; ``bench`` measures everything below the host.
ALLOWED = {
    "rtl": set(),
    "fabric": {"rtl"},
    "sim": {"rtl", "fabric"},
    "fpga": {"rtl", "fabric", "sim"},
    "runtime": {"rtl", "fabric", "sim", "fpga"},
    "tb": {"rtl", "fabric", "runtime"},
    "bench": {"rtl", "fabric", "sim", "fpga", "runtime"},
    "host": {"rtl", "fabric", "sim", "fpga", "runtime", "bench"},
    # wse.torch, the PyTorch front end: above the host, whose trainer it drives.
    "frontend": {"rtl", "fabric", "sim", "fpga", "runtime", "bench", "host"},
}


def _modules():
    modules = {}
    for folder in ALLOWED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules["wse." + ".".join(parts)] = path
    return modules


def _graph():
    modules = _modules()
    edges = collections.defaultdict(set)
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[:len(package.split(".")) - node.level + 1]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module
                targets = [module] + [f"{module}.{alias.name}" for alias in node.names]
            else:
                continue
            for target in targets:
                if target.startswith(("rtl.", "fabric.", "sim.", "runtime.", "host.", "tb.",
                                      "fpga.", "bench.")):
                    raise AssertionError(f"{path.relative_to(ROOT)} imports {target}: the "
                                         f"installed name is wse.{target}")
                if target in modules and target != name:
                    edges[name].add(target)
    return modules, edges


def test_layers_import_downward():
    _, edges = _graph()
    wrong = sorted(f"{a} imports {b}" for a, targets in edges.items() for b in targets
                   if a.split(".")[1] != b.split(".")[1]
                   and b.split(".")[1] not in ALLOWED[a.split(".")[1]])
    assert not wrong, "\n".join(wrong)


def test_no_import_circle():
    modules, edges = _graph()
    # Tarjan's strongly connected components; a component of more than one module is a circle.
    index, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for module in sorted(modules):
        if module not in index:
            visit(module)
    # A package's __init__ re-exporting its modules is not a circle through them.
    circles = [c for c in circles
               if not all(m == c[0] or m.startswith(c[0] + ".") for m in c)]
    assert not circles, f"import circles: {circles}"


#: Modules allowed past the limit, each with the issue that splits it (none today: issue 12
#: split the core into its parts, ``rtl/core_*.py``).
TOO_BIG_FOR_NOW: dict[str, str] = {}


def test_modules_stay_small():
    big = {name: n for path in _modules().values()
           if (name := str(path.relative_to(ROOT))) not in TOO_BIG_FOR_NOW
           and (n := len(path.read_text().splitlines())) > 420}
    assert not big, f"modules past ~400 lines (split them): {big}"
