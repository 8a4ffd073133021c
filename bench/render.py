"""Fill the measured figures in README.md, docs/results.md, docs/fpga.md, docs/torch.md and
docs/mesh.md from ``bench/results/*.json``.

    python -m wse.bench.render [--check] [--root DIR]

(`make render`; `make results` runs the benchmarks first.)

No figure in those documents is typed by hand: each sits between markers that name it, and this
module rewrites what is between them from the committed JSON that the benchmarks wrote.

- ``<!-- fig:NAME -->9.2<!-- /fig -->``: one figure, on one line. ``NAME`` is a key of
  :data:`FIGURES` (:mod:`bench.figures`), which says which JSON file it comes from, how it
  is derived and how it is formatted.
- ``<!-- results:begin NAME -->`` ... ``<!-- results:end -->``, each marker on a line of its own:
  a generated block, a key of :data:`BLOCKS` (tables) or ``json:FILE`` (the whole of
  ``bench/results/FILE.json`` as a fenced JSON block).

An unknown name, a missing JSON file or a missing key fails with :class:`RenderError`, naming the
command that writes the file. ``tests/test_results.py`` renders the committed JSON and requires
the documents to come out unchanged, so a figure edited by hand fails CI.
"""

import argparse
import difflib
import json
import re
import sys
from pathlib import Path

from .figures import BLOCK_FIGURES, BLOCKS, FIGURES, SOURCES, RenderError, format_figure

__all__ = ["BLOCKS", "BLOCK_FIGURES", "DOCUMENTS", "FIGURES", "SOURCES", "RenderError", "Results",
           "format_figure", "main", "render", "render_files"]

#: The documents whose figures are generated, relative to the repository's root.
DOCUMENTS = ("README.md", "docs/results.md", "docs/fpga.md", "docs/torch.md", "docs/mesh.md")


class Results:
    """The JSON files of one ``bench/results`` folder, each read once, on first use:
    ``results["gemm_sweep"]``."""

    def __init__(self, directory):
        self.directory = Path(directory)
        self._loaded = {}

    def __getitem__(self, name):
        if name not in self._loaded:
            if name not in SOURCES:
                raise RenderError(f"no JSON source named {name!r}; known: {', '.join(SOURCES)}")
            path = self.directory / f"{name}.json"
            try:
                self._loaded[name] = json.loads(path.read_text())
            except FileNotFoundError:
                target = "fpga-results" if name.startswith("fpga_") else "results"
                raise RenderError(f"{path} is missing: `make {target}` writes it "
                                  f"({SOURCES[name]})") from None
        return self._loaded[name]


# -- rendering ----------------------------------------------------------------------------------

_FIGURE = re.compile(r"<!-- fig:(?P<name>[\w.\-]+) -->(?P<text>.*?)<!-- /fig -->")
_BLOCK = re.compile(r"^(?P<begin><!-- results:begin (?P<name>[\w.:\-]+) -->\n)(?P<body>.*?)"
                    r"^(?P<end><!-- results:end -->)$", re.M | re.S)


def _block(name, results):
    if name.startswith("json:"):
        return ["```json", *json.dumps(results[name[5:]], indent=2).splitlines(), "```"]
    try:
        build = BLOCKS[name]
    except KeyError:
        raise RenderError(f"no block named {name!r} (bench/figures.py: BLOCKS)") from None
    try:
        return build(results)
    except RenderError:
        raise
    except ValueError as error:     # figures_fpga: seeds that disagree
        raise RenderError(f"block {name!r}: {error}") from None


def render(text, results):
    """``text`` with every marked figure and block regenerated from ``results``."""
    def block(m):
        if "<!-- results:begin" in m["body"]:
            raise RenderError(f"block {m['name']!r} has no `<!-- results:end -->` before the "
                              f"next block begins")
        return m["begin"] + "\n".join(_block(m["name"], results)) + "\n" + m["end"]

    def figure(m):
        return f"<!-- fig:{m['name']} -->{format_figure(m['name'], results)}<!-- /fig -->"

    text = _BLOCK.sub(block, text)
    if "<!-- results:begin" in _BLOCK.sub("", text):
        raise RenderError("a `<!-- results:begin NAME -->` has no `<!-- results:end -->` "
                          "(each marker on a line of its own)")
    return _FIGURE.sub(figure, text)


def render_files(root=".", *, check=False):
    """Render :data:`DOCUMENTS` under ``root`` from ``root/bench/results``; rewrites them
    (unless ``check``) and returns ``{path: (old, new)}`` for those that changed."""
    root = Path(root)
    results = Results(root / "bench" / "results")
    changed = {}
    for name in DOCUMENTS:
        path = root / name
        old = path.read_text()
        new = render(old, results)
        if new != old:
            changed[path] = (old, new)
            if not check:
                path.write_text(new)
    return changed


def _default_root():
    here = Path(__file__).resolve().parents[1]        # bench/.. in an editable install
    return here if (here / "bench" / "results").is_dir() else Path.cwd()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="change nothing; print the differences and fail if there are any")
    parser.add_argument("--root", type=Path, default=None,
                        help="the repository's root (default: this checkout)")
    args = parser.parse_args(argv)
    try:
        changed = render_files(args.root or _default_root(), check=args.check)
    except RenderError as error:
        sys.exit(f"render: {error}")
    for path, (old, new) in changed.items():
        if args.check:
            sys.stdout.writelines(difflib.unified_diff(
                old.splitlines(keepends=True), new.splitlines(keepends=True), str(path),
                f"{path} (rendered)"))
        else:
            print(f"rendered {path}")
    if not changed:
        print(f"{', '.join(DOCUMENTS)} agree with bench/results/*.json")
    sys.exit(1 if args.check and changed else 0)


if __name__ == "__main__":
    main()
