"""The coverage report: JSON figures, a text summary, HTML pages and an lcov file.

``python -m wse.sim.coverage_report --build build/coverage`` merges every ``coverage-*.dat``
under the build folder (what ``make coverage``'s runs wrote) and writes, into ``--out``:
``index.html`` (one row per ``rtl`` module, each linking to its Python source annotated line by
line and the Verilog lines never reached), ``summary.txt`` (printed too) and ``rtl.info`` (lcov
tracefile of the ``rtl/*.py`` lines, for ``genhtml`` where it is installed); and the figures as
JSON to ``--json``. See ``docs/coverage.md``.
"""

import argparse
import html
import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from .coverage import RTL, analyse, merge

__all__ = ["report", "figures_json", "summary", "write_html", "write_lcov", "main"]


def figures_json(coverage, *, runs, designs):
    """The figures as a JSON-ready dict: totals, and per module its figures and the Python
    lines no run reached."""
    figures = coverage.figures()
    for name, module in figures["modules"].items():
        python, _ = coverage.uncovered(name)
        module["uncovered_lines"] = python
        module["partial_lines"] = sorted(n for n, (hit, total) in
                                         coverage.modules[name].lines.items() if 0 < hit < total)
    return {"measured": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "commit": _commit(), "runs": runs, "designs": designs, **figures}


def _commit():
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, cwd=RTL.parent, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def _figure(value):
    return "  -  " if value is None else f"{value:5.1f}"


def summary(data):
    """The text summary of :func:`figures_json`'s ``data``: one line per module, then the
    Python lines no run reached, with their source."""
    total = data["total"]
    lines = [f"coverage of rtl/ ({data['runs']} runs of {len(data['designs'])} designs, "
             f"{data['measured']}, commit {data['commit']})",
             f"{'module':<22} {'line %':>7} {'lines':>11} {'partial':>8} {'toggle %':>9} "
             f"{'verilog line %':>15}"]
    rows = list(data["modules"].items()) + [("total", total)]
    for name, figure in rows:
        lines.append(f"{name:<22} {_figure(figure['line']):>7} "
                     f"{figure['lines_hit']:>5}/{figure['lines']:<5} {figure['lines_partial']:>8} "
                     f"{_figure(figure['toggle']):>9} {_figure(figure['verilog_line']):>15}")
    if data.get("changed_since_built"):
        lines.append(f"edited since the oldest build (its line numbers may be off there): "
                     f"{', '.join(data['changed_since_built'])}")
    missed = [(name, n) for name, figure in data["modules"].items()
              for n in figure.get("uncovered_lines", [])]
    lines.append(f"python lines no run reached: {len(missed)}")
    for name, number in missed:
        source = _source(name)
        text = source[number - 1].strip() if number <= len(source) else ""
        lines.append(f"  {name}:{number}: {text}")
    return "\n".join(lines)


def _source(name):
    try:
        return (RTL / Path(name).name).read_text().splitlines()
    except OSError:
        return []


_STYLE = """body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}
td,th{padding:2px 8px;border-bottom:1px solid #ddd;text-align:right}td.l,th.l{text-align:left}
pre{margin:0}.src td{border:0;padding:0 6px;font-family:monospace;white-space:pre;text-align:left}
.hit{background:#d9f2d9}.part{background:#fff0b3}.miss{background:#f8c8c8}.n{color:#888}"""


def _page(title, body):
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
            f"</title><style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
            f"{body}</body></html>\n")


def _page_name(name):
    return name.replace("/", "_") + ".html"


def write_html(coverage, data, directory):
    """``index.html`` and one page per module into ``directory``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, figure in data["modules"].items():
        rows.append(f"<tr><td class='l'><a href='{_page_name(name)}'>{name}</a></td>"
                    f"<td>{_figure(figure['line'])}</td><td>{figure['lines_hit']}/"
                    f"{figure['lines']}</td><td>{figure['lines_partial']}</td>"
                    f"<td>{_figure(figure['toggle'])}</td>"
                    f"<td>{figure['toggles_hit']}/{figure['toggles']}</td>"
                    f"<td>{_figure(figure['verilog_line'])}</td>"
                    f"<td>{figure['verilog_lines_hit']}/{figure['verilog_lines']}</td></tr>")
        _write_module_page(coverage, name, directory / _page_name(name))
    total = data["total"]
    rows.append(f"<tr><th class='l'>total</th><th>{_figure(total['line'])}</th><th>"
                f"{total['lines_hit']}/{total['lines']}</th><th>{total['lines_partial']}</th>"
                f"<th>{_figure(total['toggle'])}</th>"
                f"<th>{total['toggles_hit']}/{total['toggles']}</th>"
                f"<th>{_figure(total['verilog_line'])}</th>"
                f"<th>{total['verilog_lines_hit']}/{total['verilog_lines']}</th></tr>")
    body = (f"<p>{data['runs']} Verilator runs of {len(data['designs'])} designs "
            f"({', '.join(html.escape(d) for d in data['designs'])}), measured "
            f"{data['measured']} at commit {data['commit']}. Python lines: those holding a "
            f"coverage point (a branch or a block of statements); a line is reached when any "
            f"of its points was. Verilog lines: every line with a point, in every design, "
            f"reached only when all its points were. How it is measured: docs/coverage.md.</p>"
            f"<table><tr><th class='l'>module</th><th>line %</th><th>lines</th><th>partial</th>"
            f"<th>toggle %</th><th>toggle bits</th><th>Verilog line %</th><th>Verilog lines"
            f"</th></tr>{''.join(rows)}</table>")
    if data.get("changed_since_built"):
        body += (f"<p class='miss'>Edited since the oldest build (their line numbers may be "
                 f"off): {html.escape(', '.join(data['changed_since_built']))}</p>")
    (directory / "index.html").write_text(_page("RTL coverage", body))
    return directory / "index.html"


def _write_module_page(coverage, name, path):
    module = coverage.modules[name]
    rows = []
    for number, text in enumerate(_source(name), 1):
        hit, total = module.lines.get(number, (None, None))
        css = ("" if total is None else "hit" if hit == total else "part" if hit else "miss")
        count = "" if total is None else f"{hit}/{total}"
        rows.append(f"<tr class='{css}'><td class='n'>{number}</td><td class='n'>{count}</td>"
                    f"<td>{html.escape(text)}</td></tr>")
    _, verilog = coverage.uncovered(name)
    missed = [f"<tr><td class='l'>{html.escape(Path(f).parent.name)}</td><td>{n}</td>"
              f"<td class='l'>{_python(coverage, f, n)}</td><td class='l'><pre>"
              f"{html.escape(text)}</pre></td></tr>" for f, n, text in verilog[:3000]]
    body = (f"<p><a href='index.html'>index</a>. Each line: the points reached / the points "
            f"mapped to it (green all, yellow some, red none).</p>"
            f"<table class='src'>{''.join(rows)}</table>"
            f"<h2>Verilog lines never reached ({len(verilog)})</h2><table><tr><th class='l'>"
            f"design</th><th>line</th><th class='l'>from</th><th class='l'>Verilog</th></tr>"
            f"{''.join(missed)}</table>")
    path.write_text(_page(name, body))


def _python(coverage, file, number):
    return ", ".join(f"{Path(f).name}:{n}" for f, n in coverage.maps[file].python_lines(number))


def write_lcov(coverage, path):
    """An lcov tracefile of the ``rtl/*.py`` lines (``genhtml rtl.info`` makes pages of it)."""
    out = ["TN:rtl"]
    for name in sorted(coverage.modules):
        lines = coverage.modules[name].lines
        out.append(f"SF:{RTL / Path(name).name}")
        out += [f"DA:{n},{hit}" for n, (hit, _) in sorted(lines.items())]
        out += [f"LH:{sum(1 for h, _ in lines.values() if h)}", f"LF:{len(lines)}",
                "end_of_record"]
    Path(path).write_text("\n".join(out) + "\n")


def _changed_since_built(coverage):
    """The ``rtl`` files edited after the oldest Verilog export that maps into them: their line
    numbers in the report may no longer be those of the file as it now reads."""
    oldest = min(Path(f).stat().st_mtime for f in coverage.maps)
    return sorted(name for name in coverage.modules
                  if (RTL / Path(name).name).is_file()
                  and (RTL / Path(name).name).stat().st_mtime > oldest)


def report(build, out, json_path=None):
    """Merge the ``.dat`` files under ``build``, write the report into ``out`` (and the JSON to
    ``json_path`` if given); return the JSON data."""
    dats = sorted(Path(build).rglob("coverage-*.dat"))
    if not dats:
        raise SystemExit(f"no coverage-*.dat under {build}: run the regression with "
                         f"WSE_COVERAGE=1 first (make coverage)")
    coverage = analyse(merge(dats))
    designs = sorted({Path(f).parent.name for f in coverage.maps})     # top-digest
    data = figures_json(coverage, runs=len(dats), designs=designs)
    data["changed_since_built"] = _changed_since_built(coverage)
    out = Path(out)
    write_html(coverage, data, out)
    write_lcov(coverage, out / "rtl.info")
    text = summary(data)
    (out / "summary.txt").write_text(text + "\n")
    if json_path:
        Path(json_path).write_text(json.dumps(data, indent=2) + "\n")
    return data, text


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m wse.sim.coverage_report",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build/coverage",
                        help="folder whose coverage-*.dat files are merged")
    parser.add_argument("--out", default=None, help="report folder (default: BUILD/report)")
    parser.add_argument("--json", default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    out = args.out or Path(args.build) / "report"
    _, text = report(args.build, out, args.json)
    print(text)
    print(f"report: {Path(out).resolve() / 'index.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
