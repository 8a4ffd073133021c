"""docs/layout.md's module table lists every module, so that it cannot fall behind the code.

Every ``.py`` file under the installed folders must appear in the table of docs/layout.md's
``## Modules`` section as ``folder/name.py``, and every package (a folder with ``__init__.py``)
as a ``folder/`` row; a row naming a module that does not exist fails too.
"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("rtl", "fabric", "sim", "runtime", "host", "tb", "fpga", "bench", "frontend")


def _layout_entries():
    text = (ROOT / "docs" / "layout.md").read_text()
    section = text.split("\n## Modules\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    return {m for row in rows for m in re.findall(r"^\| \**`([\w/.]+)`\**", row)}


def _modules():
    names = set()
    for folder in FOLDERS:
        for path in (ROOT / folder).rglob("*.py"):
            if "__pycache__" in path.parts:
                continue
            relative = path.relative_to(ROOT)
            names.add(f"{relative.parent.as_posix()}/" if path.name == "__init__.py"
                      else relative.as_posix())
    return names


def test_every_module_is_in_the_layout_table():
    missing = _modules() - _layout_entries()
    assert not missing, f"docs/layout.md's module table lacks: {sorted(missing)}"


def test_the_layout_table_names_no_missing_module():
    stale = {entry for entry in _layout_entries() - _modules()
             if entry.endswith(".py") or entry.rstrip("/") in FOLDERS}
    assert not stale, f"docs/layout.md's module table names what does not exist: {sorted(stale)}"
