"""The measured figures in README.md and docs/results.md are what ``bench/results/*.json`` gives.

``bench/render.py`` fills every marked figure from the committed JSON; rendering the committed
JSON must leave the documents unchanged, so a figure edited by hand (or JSON rewritten by a
benchmark without ``make render``) fails here. Fix it with ``make render``, or rerun the
benchmark with ``make results``.
"""

import difflib
import json
import re
from pathlib import Path

import pytest

from wse.bench import render

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"


def test_documents_match_committed_json():
    changed = render.render_files(ROOT, check=True)
    diff = "".join(line for path, (old, new) in changed.items() for line in difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True), str(path), "rendered"))
    assert not changed, f"figures differ from bench/results/*.json (run `make render`):\n{diff}"


def test_every_figure_and_block_is_used():
    text = "".join((ROOT / name).read_text() for name in render.DOCUMENTS)
    used = set(re.findall(r"<!-- (?:fig:|results:begin )([\w.:\-]+) -->", text))
    unused = (set(render.FIGURES) | set(render.BLOCKS)) - used - render.BLOCK_FIGURES
    assert not unused, f"defined in bench/render.py but in no document: {sorted(unused)}"


def test_every_json_file_has_a_source():
    files = {path.stem for path in RESULTS.glob("*.json")}
    assert files == set(render.SOURCES), "bench/results/*.json and render.SOURCES disagree"
    for path in RESULTS.glob("*.json"):
        json.loads(path.read_text())


def test_a_hand_edited_figure_is_put_back():
    results = render.Results(RESULTS)
    text = (ROOT / "README.md").read_text()
    edited, n = re.subn(r"(<!-- fig:gemm\.s90\.speedup -->)[^<]*(<!-- /fig -->)", r"\g<1>99x\2",
                        text)
    assert n == 1 and edited != text
    assert render.render(edited, results) == render.render(text, results)


def test_a_hand_edited_block_is_put_back():
    results = render.Results(RESULTS)
    text = "a\n<!-- results:begin gemm_sweep.table -->\n| made | up |\n<!-- results:end -->\nb\n"
    rendered = render.render(text, results)
    assert "made" not in rendered
    assert rendered.startswith("a\n<!-- results:begin gemm_sweep.table -->\n| sparsity |")
    assert rendered.endswith("\n<!-- results:end -->\nb\n")
    assert render.render(rendered, results) == rendered


def test_json_block_is_the_whole_file():
    results = render.Results(RESULTS)
    rendered = render.render("<!-- results:begin json:router -->\n<!-- results:end -->\n", results)
    body = rendered.split("```json\n")[1].split("```")[0]
    assert json.loads(body) == json.loads((RESULTS / "router.json").read_text())


@pytest.mark.parametrize(("text", "message"), [
    ("<!-- fig:no.such -->1<!-- /fig -->", "no figure named 'no.such'"),
    ("<!-- results:begin no.such -->\n<!-- results:end -->", "no block named 'no.such'"),
    ("<!-- results:begin json:nothing -->\n<!-- results:end -->", "no JSON source named 'nothing'"),
    ("<!-- results:begin json:router -->\nno end\n", "has no `<!-- results:end -->`"),
    ("<!-- results:begin json:router -->\n<!-- results:begin json:pe -->\n<!-- results:end -->",
     "block 'json:router' has no `<!-- results:end -->` before the next block begins"),
])
def test_bad_markers_fail_with_a_message(text, message):
    with pytest.raises(render.RenderError, match=re.escape(message)):
        render.render(text, render.Results(RESULTS))


def test_a_missing_json_file_names_its_command(tmp_path):
    with pytest.raises(render.RenderError, match=re.escape("`make results` writes it "
                                                           "(wse bench router --json)")):
        render.Results(tmp_path)["router"]
