"""The coverage tooling (``make coverage``): Verilator's ``.dat`` files read, merged and mapped to
the Verilog and the ``rtl`` lines; and one short coverage run of a MAC through the report."""

import json
import time

import pytest

from wse.sim import coverage
from wse.sim.coverage_report import report

#: A combinational ``always`` as Amaranth's Verilog export writes it: the time-zero trigger, a
#: default, and an ``if`` on an expression whose ``src`` names the Python line.
VERILOG = """\
(* src = "/repo/rtl/demo.py:10" *)
module demo(a, y);
  reg \\$auto$verilog_backend.cc:2505:dump_module$1  = 0;
  (* src = "/repo/rtl/demo.py:11" *)
  input a;
  wire a;
  (* src = "/repo/rtl/demo.py:12" *)
  output y;
  reg y;
  wire \\$1 ;
  assign \\$1  = ~ (* src = "/repo/rtl/demo.py:20" *) a;
  always @* begin
    if (\\$auto$verilog_backend.cc:2505:dump_module$1 ) begin end
    y = 1'h0;
    if (\\$1 ) begin
      y = 1'h1;
    end
  end
endmodule
"""


def _dat(path, verilog, points):
    lines = ["# SystemC::Coverage-3"]
    for line, kind, comment, count, span in points:
        page = "v_toggle" if kind == "toggle" else f"v_{kind}"
        key = f"\x01f\x02{verilog}\x01l\x02{line}\x01n\x020\x01t\x02{kind}\x01page\x02{page}/demo" \
              f"\x01o\x02{comment}" + (f"\x01S\x02{span}" if span else "") + "\x01h\x02demo"
        lines.append(f"C '{key}' {count}")
    path.write_text("\n".join(lines) + "\n", encoding="latin-1")
    return path


def test_points_are_merged_and_mapped_to_verilog_and_python_lines(tmp_path):
    verilog = tmp_path / "demo.v"
    verilog.write_text(VERILOG)
    first = _dat(tmp_path / "coverage-1.dat", verilog, [
        (13, "branch", "if", 0, "13"),          # the trigger: not logic, left out
        (14, "line", "block", 5, "14"),
        (15, "branch", "if", 3, "15-16"),
        (15, "branch", "else", 0, ""),
        (5, "toggle", "a:0->1", 1, ""),
        (5, "toggle", "a:1->0", 0, ""),
    ])
    second = _dat(tmp_path / "coverage-2.dat", verilog, [(5, "toggle", "a:1->0", 2, "")])
    points = coverage.merge([first, second])
    assert sum(count for p, count in points.items() if p.signal == "a:1->0") == 2
    result = coverage.analyse(points)
    assert set(result.modules) == {"rtl/demo.py"}
    demo = result.modules["rtl/demo.py"]
    # the if's condition is demo.py:20; both assignments to y map to its declaration, 12
    assert demo.lines == {20: (1, 2), 12: (2, 2)}
    assert demo.verilog == {(str(verilog), 14): 5, (str(verilog), 15): 0,
                            (str(verilog), 16): 3}
    figures = result.figures()["modules"]["rtl/demo.py"]
    assert figures["line"] == 100.0 and figures["verilog_line"] == 66.67
    assert figures["toggle"] == 100.0 and figures["toggles"] == 2
    python, missed = result.uncovered("rtl/demo.py")
    assert python == [] and missed == [(str(verilog), 15, "if (\\$1 ) begin")]


@pytest.mark.xdist_group("verilator")
def test_a_coverage_run_writes_the_report(tmp_path, monkeypatch):
    """A coverage build of a small MAC, 300 operations, then the report: every figure a
    percentage, the MAC's own module reached, the HTML page written."""
    from wse.rtl.mac import Mac
    from wse.rtl.numfmt import FixedPoint
    from wse.sim.cocotb_run import build, run

    monkeypatch.setenv("WSE_COVERAGE", "1")
    fmt = FixedPoint(width=8, frac_bits=3, acc_width=16)
    built = build(Mac(fmt), top="mac_8_16", sim="verilator")
    assert built.coverage and 'src = "' in built.verilog.read_text()
    result = run(built, module="wse.tb.mac_tests", name=f"coverage-check-{time.time_ns()}",
                 params={"fmt": fmt.to_dict(), "seed": 3, "count": 300})
    assert result.passed, result.failures
    assert len(list(result.test_dir.glob("coverage-*.dat"))) == 1
    data, text = report(result.test_dir, tmp_path / "report", tmp_path / "coverage.json")
    assert json.loads((tmp_path / "coverage.json").read_text()) == data
    assert data["runs"] == 1 and data["designs"] == [built.directory.name]
    assert "rtl/mac.py" in data["modules"]
    for figures in [data["total"], *data["modules"].values()]:
        for name in ("line", "toggle", "verilog_line"):
            assert figures[name] is None or 0 <= figures[name] <= 100, (name, figures)
    assert data["modules"]["rtl/mac.py"]["lines_hit"] > 0
    assert "rtl/mac.py" in text
    assert "rtl/mac.py" in (tmp_path / "report" / "index.html").read_text()
    assert (tmp_path / "report" / "rtl_mac.py.html").is_file()
    assert "SF:" in (tmp_path / "report" / "rtl.info").read_text()
