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

from wse.bench import figures_fpga, render

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
    """Every JSON has a source, and every benchmark's source a JSON; an FPGA build not run yet
    (`make fpga-results` takes hours) has none, and its figures say so."""
    files = {path.stem for path in RESULTS.glob("*.json")}
    sources = set(render.SOURCES)
    fpga = {name for name in sources if name.startswith("fpga_")}
    assert files - fpga == sources - fpga, "bench/results/*.json and render.SOURCES disagree"
    assert files & fpga <= fpga, "an FPGA JSON without a source in render.SOURCES"
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


# -- the FPGA builds (`make fpga-results`, bench/figures_fpga.py) --------------------------------

def test_a_hand_edited_fpga_figure_is_put_back():
    results = render.Results(RESULTS)
    for document, figure in (("README.md", r"fig:fpga\.ecp5_targets_met"),
                             ("docs/fpga.md", r"fig:fpga\.router\.lut4_cells"),
                             ("docs/fpga.md", r"fig:fpga\.tools")):
        text = (ROOT / document).read_text()
        edited, n = re.subn(rf"(<!-- {figure} -->)[^<]*(<!-- /fig -->)", r"\g<1>1234\2", text)
        assert n >= 1 and edited != text
        assert render.render(edited, results) == render.render(text, results)
    text = (ROOT / "docs/fpga.md").read_text()
    edited = re.sub(r"\| (\*\*[\d ]+ \()", r"| **12 345 (", text, count=1)
    assert edited != text and render.render(edited, results) == render.render(text, results)


def _outside_markers(text):
    text = re.sub(r"<!-- results:begin .*?<!-- results:end -->", "", text, flags=re.S)
    return re.sub(r"<!-- fig:.*?<!-- /fig -->", "", text, flags=re.S)


#: What an FPGA figure looks like: a number with a unit of an FPGA build's report.
_FPGA_FIGURE = re.compile(r"(?<![\w.])\d[\d .,/–-]*\s*(?:MHz|LUT4?s?\b|`LUT4`|`CCU2C`|LUT-RAM|"
                          r"places|logic cells|FFs|flip-flops|ns\b)")


def test_no_fpga_figure_is_typed_by_hand():
    """Every FPGA figure of the README, docs/results.md and docs/fpga.md's figures of today and
    of where the logic goes sits between markers (docs/fpga.md's decisions keep the figures
    that decided them, measured on the RTL of their day)."""
    fpga = (ROOT / "docs/fpga.md").read_text()

    def section(title):
        start = fpga.index(f"\n## {title}\n")
        return fpga[start:fpga.index("\n## ", start + 1)]

    for name, text in (("README.md", (ROOT / "README.md").read_text()),
                       ("docs/results.md", (ROOT / "docs/results.md").read_text()),
                       ("docs/fpga.md, the figures today", section("The figures today")),
                       ("docs/fpga.md, where the logic goes", section("Where the logic goes"))):
        typed = _FPGA_FIGURE.findall(_outside_markers(text))
        assert not typed, f"{name}: FPGA figures typed by hand, not rendered: {typed}"


def test_the_fpga_figure_pattern_finds_typed_figures():
    assert _FPGA_FIGURE.findall("at 53.48 / 52.89 MHz, 45 947 LUTs, 1820 `LUT4`") == [
        "53.48 / 52.89 MHz", "45 947 LUTs", "1820 `LUT4`"]
    assert not _FPGA_FIGURE.findall(_outside_markers("<!-- fig:x -->53 MHz<!-- /fig -->"))
    assert not _FPGA_FIGURE.findall("each module's own LUT4 places")


def _fpga_results():
    return {name: json.loads((RESULTS / f"{name}.json").read_text())
            for name in render.SOURCES if name.startswith("fpga_")
            and (RESULTS / f"{name}.json").is_file()}


def test_seeds_of_different_netlists_fail_to_render():
    results = _fpga_results()
    results["fpga_icebreaker_1x1_seed2"]["cells"]["SB_LUT4"] += 1
    with pytest.raises(render.RenderError, match="seed 2 was built from another netlist"):
        render.format_figure("fpga.tools", results)
    with pytest.raises(render.RenderError, match="block 'fpga.builds'.*another netlist"):
        render.render("<!-- results:begin fpga.builds -->\n<!-- results:end -->\n", results)


def test_a_report_of_another_seed_fails_to_render():
    results = _fpga_results()
    results["fpga_icebreaker_1x1_seed3"]["seed"] = 1
    with pytest.raises(render.RenderError, match=r"holds icebreaker 1x1 \w+ seed 1"):
        render.render("<!-- results:begin fpga.summary -->\n<!-- results:end -->\n", results)


def test_a_missing_fpga_json_names_make_fpga_results(tmp_path):
    with pytest.raises(render.RenderError, match=re.escape(
            "`make fpga-results` writes it (wse build --board ulx3s-85f --mesh 4x4 --seed 2")):
        render.Results(tmp_path)["fpga_ulx3s-85f_4x4_seed2"]


def test_builds_not_run_yet_say_so():
    """A seed after the first not built yet is left out; a whole build not built yet says so."""
    results = _fpga_results()
    for name in ("fpga_ulx3s-85f_4x4_seed2", "fpga_ulx3s-85f_4x4_seed3",
                 "fpga_router_ecp5-85f", "fpga_breakdown_ulx3s-85f_4x4"):
        results.pop(name, None)
    summary = "\n".join(render.BLOCKS["fpga.summary"](results))
    assert "seed 1 (25 MHz clock" in summary
    assert f"| the router alone, ECP5-85F, out of context | {figures_fpga.NOT_BUILT} |" in summary
    assert render.format_figure("fpga.router.luts", results) == figures_fpga.NOT_BUILT
    assert render.BLOCKS["fpga.breakdown"](results) == [
        "*Not built yet: `make fpga-results` writes `fpga_breakdown_ulx3s-85f_4x4.json`.*"]
    results.pop("fpga_ulx3s-85f_4x4_seed1")
    with pytest.raises(render.RenderError, match="fpga_ulx3s-85f_4x4_seed1"):
        render.format_figure("fpga.ulx3s_4x4.fmax_min", results)
