"""C++ for the lanes model (:mod:`sim.lanes`): the vector types and memory helpers every model
starts with (:data:`PRELUDE`), and :class:`Writer`, the statement that computes each node of the
tile's netlist for one group of :data:`LANES` lanes."""

from pathlib import Path

from .lanes_netlist import COMPARE, FLOPS
from .lanes_netlist import mask as _mask
from .lanes_netlist import to_int as _int
from .lanes_netlist import value_type as _type
from .lanes_netlist import vector_type as _vtype

__all__ = ["LANES", "PRELUDE", "PRELUDE_PATH", "Writer", "lane_get", "lane_set"]

#: Tiles evaluated by one vector operation (the vector types of :data:`PRELUDE` hold 16).
LANES = 16

#: What every model starts with: its types and helpers (``sim/harness/lanes_prelude.h``).
PRELUDE_PATH = Path(__file__).with_name("harness") / "lanes_prelude.h"
PRELUDE = "// Written by sim/lanes.py for one mesh: do not edit.\n" + PRELUDE_PATH.read_text()


#: Cells whose operands are both extended to the result's width, signed only when both are.
_BINARY_EXTENDED = {"$and", "$or", "$xor", "$add", "$sub", "$mul"}

#: AVX-512's comparison codes (``CMPU_W<code>`` and the like in the prelude).
_CODE = {"$eq": 0, "$lt": 1, "$le": 2, "$ne": 4, "$ge": 5, "$gt": 6}

#: Cells of a one-bit result computed on masks (the others as vectors, then their bit 0).
_MASK_CELLS = {"$not", "$pos", "$and", "$or", "$xor", "$add", "$sub", "$mul", "$mux", "$pmux",
               "$logic_not", "$reduce_or", "$reduce_bool", "$reduce_and", "$logic_and",
               "$logic_or", *COMPARE}


def lane_get(type_, ref, lane):
    """C++ for lane ``lane`` of ``ref``, a value of type ``type_`` (``M``, ``W`` or ``D``)."""
    return f"(({ref} >> {lane}) & 1u)" if type_ == "M" else f"{ref}[{lane}]"


def lane_set(type_, ref, lane, value):
    """C++ that sets lane ``lane`` of ``ref`` (type ``type_``) to ``value``."""
    if type_ == "M":
        return f"{ref} = ({ref} & ~(1u << {lane})) | ((M({value}) & 1u) << {lane});"
    return f"{ref}[{lane}] = {value};"


class Writer:
    """C++ expressions for the tile's nodes, for one group of lanes ``g``."""

    def __init__(self, tile):
        self.tile = tile

    def ref(self, name):
        sig = self.tile.signals[name]
        if sig.kind == "state":                 # this cycle's registers; ``n.`` the next's
            return f"s.{name}[g]"
        return name if sig.kind == "comb" and not sig.stored else f"{name}[g]"

    def value(self, runs, width, signed=False, vector=None):
        """The runs as a value of ``width`` bits (extended by sign or zero, or truncated): a
        mask ``M`` when ``width`` is 1, unless ``vector``, else a vector."""
        if not (width > 1 if vector is None else vector):
            return self._bit(runs[0])
        t = _vtype(width)
        bits = 32 if t == "W" else 64
        suffix = "u" if t == "W" else "ull"
        terms, const, pos = [], 0, 0
        k = 0
        while k < len(runs):
            run = runs[k]
            k += 1
            if run[0] == "const":
                const |= run[1] << pos
                pos += run[2]
                continue
            _, name, offset, n = run
            copies = 1                # one bit repeated (a mask: ``x.replicate(n)``)
            while n == 1 and k < len(runs) and runs[k] == run:
                copies += 1
                k += 1
            sig = self.tile.signals[name]
            expr = self.ref(name)
            if sig.width == 1:        # a mask: its lanes' bits (one, or repeated) put in place
                if pos < bits:
                    ones = (_mask(copies) << pos) & _mask(bits)
                    terms.append(f"EXPAND_{t}({expr}, {ones:#x}{suffix})")
                pos += copies
                continue
            if offset:
                expr = f"({expr} >> {offset})"
            if _vtype(sig.width) != t:
                expr = f"TO_{t}({expr})"
            if offset + n < sig.width or sig.width > bits:
                expr = f"({expr} & {_mask(min(n, bits))}{suffix})"
            if copies > 1:
                expr = f"((({t}){{}} - {expr}) & {_mask(min(copies, bits))}{suffix})"
                n = copies
            if pos:
                expr = f"({expr} << {pos})" if pos < bits else None
            if expr is not None:
                terms.append(expr)
            pos += n
        total = pos
        const &= _mask(bits)
        if not terms:      # no signal bit within the lane: the constants alone
            expr = f"(({t}){{}} + {const}{suffix})"
        else:
            if const:
                terms.append(f"{const}{suffix}")
            expr = terms[0] if len(terms) == 1 else "(" + " | ".join(terms) + ")"
        if signed and total < width:
            shift = bits - total
            expr = f"(({t})((S{t})({expr} << {shift}) >> {shift}) & {_mask(width)}{suffix})"
        elif total > width:
            expr = f"({expr} & {_mask(width)}{suffix})"
        return expr

    def _bit(self, run):
        """The first bit of ``run`` as a mask."""
        if run[0] == "const":
            return "ALL" if run[1] & 1 else "0u"
        _, name, offset, _ = run
        sig = self.tile.signals[name]
        if sig.width == 1:
            return self.ref(name)
        return f"BIT_{_vtype(sig.width)}({self.ref(name)}, {offset})"

    def _nonzero(self, runs, width):
        """A mask of the lanes where the runs (``width`` bits) are not zero."""
        if width == 1:
            return self.value(runs, 1)
        return f"NZ_{_vtype(width)}({self.value(runs, width)})"

    def node(self, node):
        """The statement that computes ``node`` (its output's declaration or store)."""
        kind, i, out = node.kind, node.inputs, node.out
        if kind == "port":
            return f"{out.name}[g] = {self.value(i['A'], out.width)};"
        if kind == "read":
            _, size, _, _ = self.tile.memories[node.memory]
            addr = self.value(i["ADDR"], 32)
            word = f"read_words(&{node.memory}[g][0][0], {addr}, {size})"
            return f"{self._declare(out)} = {self._from_vector(word, out.width)};"
        if kind == "sync_read":
            _, size, _, _ = self.tile.memories[node.memory]
            addr = self.value(i["ADDR"], 32)
            word = f"read_words(&{node.memory}[g][0][0], {addr}, {size})"
            read = self._from_vector(word, out.width)
            return f"n.{out.name}[g] = {self._enabled(out, i['EN'], read)};"
        if kind == "write":
            return (f"wa_{node.name}[g] = {self.value(i['ADDR'], 32)}; "
                    f"wd_{node.name}[g] = {self.value(i['DATA'], node.width, vector=True)}; "
                    f"we_{node.name}[g] = {self.value(i['EN'], node.width, vector=True)};")
        if kind in FLOPS:
            return f"n.{out.name}[g] = {self._flop(node)};"
        return f"{self._declare(out)} = {self._cell(node)};"

    def _declare(self, sig):
        return f"{sig.name}[g]" if sig.stored else f"{_type(sig.width)} {sig.name}"

    @staticmethod
    def _from_vector(expr, width):
        """A vector ``expr`` as a value of ``width`` bits (its bit 0 as a mask for one bit)."""
        return f"BIT_{_vtype(width)}({expr}, 0)" if width == 1 else expr

    def _polar(self, node, port):
        """The mask of a flip-flop's control ``port`` (inverted for an active-low one)."""
        m = self.value(node.inputs[port], 1)
        if not _int(node.cell["parameters"].get(f"{port}_POLARITY", "1")):
            m = f"({m} ^ ALL)"
        return m

    def _choose(self, width, m, a, b):
        """Per lane: ``b`` where the mask ``m`` is set, else ``a``."""
        if width == 1:
            return f"(({b} & {m}) | ({a} & ~{m}))"
        return f"SEL_{_vtype(width)}({m}, {a}, {b})"

    def _enabled(self, out, en_runs, value):
        en = self.value(en_runs, 1)
        return self._choose(out.width, en, f"s.{out.name}[g]", value)

    def _flop(self, node):
        p, i, q = node.cell["parameters"], node.inputs, node.out
        w = q.width
        value = self.value(i["D"], w)
        if w == 1:
            reset = "ALL" if _int(p.get("SRST_VALUE", "0")) & 1 else "0u"
        else:
            t = _vtype(w)
            reset = f"(({t}){{}} + {_int(p.get('SRST_VALUE', '0'))}{'u' if t == 'W' else 'ull'})"
        qref = f"s.{q.name}[g]"
        kind = node.kind
        if kind == "$dff":
            return value
        if kind == "$sdff":
            return self._choose(w, self._polar(node, "SRST"), value, reset)
        en = self._polar(node, "EN")
        if kind == "$dffe":
            return self._choose(w, en, qref, value)
        srst = self._polar(node, "SRST")
        if kind == "$sdffe":
            return self._choose(w, srst, self._choose(w, en, qref, value), reset)
        # $sdffce: the reset only while enabled
        return self._choose(w, en, qref, self._choose(w, srst, value, reset))

    def _cell(self, node):
        kind, y = node.kind, node.out.width
        if y == 1 and kind in _MASK_CELLS:
            return self._mask_cell(node)
        if kind in ("$mux", "$pmux"):
            return self._mux(node)
        if kind in _MASK_CELLS - {"$not", "$pos", *_BINARY_EXTENDED}:
            # a test whose result is wider than a bit: 0 or 1 in every lane
            t = _vtype(y)
            return f"EXPAND_{t}({self._mask_cell(node)}, 1{'u' if t == 'W' else 'ull'})"
        return self._from_vector(self._vector_cell(node), y)

    def _mux(self, node):
        i, y = node.inputs, node.out.width
        if node.kind == "$mux":
            return self._choose(y, self.value(i["S"], 1), self.value(i["A"], y),
                                self.value(i["B"], y))
        expr = self.value(i["A"], y)
        n = sum(1 for k in i if k.startswith("S"))
        for k in reversed(range(n)):      # the first case that matches wins
            expr = self._choose(y, self.value(i[f"S{k}"], 1), expr, self.value(i[f"B{k}"], y))
        return expr

    def _mask_cell(self, node):
        """A cell's one-bit result as a mask."""
        kind, p, i = node.kind, node.cell["parameters"], node.inputs
        a_width = _int(p.get("A_WIDTH", "0"))
        b_width = _int(p.get("B_WIDTH", "0"))
        if kind in ("$mux", "$pmux"):
            return self._mux(node)
        if kind == "$not":
            return f"({self.value(i['A'], 1)} ^ ALL)"
        if kind == "$pos":
            return self.value(i["A"], 1)
        if kind in ("$and", "$or", "$xor", "$add", "$sub", "$mul"):
            op = {"$and": "&", "$or": "|", "$xor": "^", "$add": "^", "$sub": "^", "$mul": "&"}
            return f"({self.value(i['A'], 1)} {op[kind]} {self.value(i['B'], 1)})"
        if kind in ("$reduce_or", "$reduce_bool"):
            return self._nonzero(i["A"], a_width)
        if kind == "$logic_not":
            return f"({self._nonzero(i['A'], a_width)} ^ ALL)"
        if kind == "$reduce_and":
            if a_width == 1:
                return self.value(i["A"], 1)
            t = _vtype(a_width)
            return (f"CMPU_{t}<0>({self.value(i['A'], a_width)}, "
                    f"(({t}){{}} + {_mask(a_width)}{'u' if t == 'W' else 'ull'}))")
        if kind in ("$logic_and", "$logic_or"):
            op = "&" if kind == "$logic_and" else "|"
            return f"({self._nonzero(i['A'], a_width)} {op} {self._nonzero(i['B'], b_width)})"
        # a comparison
        w = max(a_width, b_width)
        signed = bool(_int(p.get("A_SIGNED", "0"))) and bool(_int(p.get("B_SIGNED", "0")))
        if w == 1:   # one-bit operands: 1 is -1 when signed, so signed order is reversed
            a, b = self.value(i["A"], 1), self.value(i["B"], 1)
            if signed and kind not in ("$eq", "$ne"):
                a, b = b, a
            return {"$eq": f"({a} ^ {b} ^ ALL)", "$ne": f"({a} ^ {b})",
                    "$lt": f"(~{a} & {b} & ALL)", "$le": f"((~{a} | {b}) & ALL)",
                    "$gt": f"({a} & ~{b} & ALL)", "$ge": f"(({a} | ~{b}) & ALL)"}[kind]
        t = _vtype(w)
        a, b = self.value(i["A"], w, signed), self.value(i["B"], w, signed)
        bits = 32 if t == "W" else 64
        if signed and w < bits:      # the lanes' sign bit made the operands' own
            a = f"({t})((S{t})({a} << {bits - w}) >> {bits - w})"
            b = f"({t})((S{t})({b} << {bits - w}) >> {bits - w})"
        return f"CMP{'S' if signed else 'U'}_{t}<{_CODE[kind]}>({a}, {b})"

    def _vector_cell(self, node):
        """A cell computed as vectors (``$add``, ``$shl``... of more than a bit)."""
        kind, p, i = node.kind, node.cell["parameters"], node.inputs
        y = node.out.width
        t = _vtype(y)
        suffix = "u" if t == "W" else "ull"

        def value(port, width, signed=False):
            return self.value(i[port], width, signed, vector=True)

        a_signed = bool(_int(p.get("A_SIGNED", "0")))
        b_signed = bool(_int(p.get("B_SIGNED", "0")))
        if kind in _BINARY_EXTENDED:   # both operands extended by sign only if both are signed
            a_signed = b_signed = a_signed and b_signed
        a_width = _int(p.get("A_WIDTH", "0"))
        b_width = _int(p.get("B_WIDTH", "0"))
        masked = (lambda e: e) if y in (32, 64) else (lambda e: f"({e} & {_mask(y)}{suffix})")
        if kind == "$not":
            return masked(f"~{value('A', y, a_signed)}")
        if kind == "$pos":
            return value("A", y, a_signed)
        if kind in ("$and", "$or", "$xor"):
            op = {"$and": "&", "$or": "|", "$xor": "^"}[kind]
            return f"({value('A', y, a_signed)} {op} {value('B', y, b_signed)})"
        if kind in ("$add", "$sub", "$mul"):
            op = {"$add": "+", "$sub": "-", "$mul": "*"}[kind]
            return masked(f"({value('A', y, a_signed)} {op} {value('B', y, b_signed)})")
        if kind in ("$shl", "$shr"):
            if b_signed:
                raise ValueError("the lanes model has no signed shift amount")
            w = y if kind == "$shl" else max(a_width, y)
            tw = _vtype(w)
            bits = 32 if tw == "W" else 64
            if b_width > bits:
                raise ValueError(f"the lanes model has no {b_width}-bit shift amount")
            a, b = value("A", w, a_signed), value("B", w if b_width <= w else bits)
            op = "<<" if kind == "$shl" else ">>"
            expr = f"(({a} {op} ({b} & {bits - 1})) & ({tw})({b} < {bits}))"
            if tw != t:
                expr = f"TO_{t}({expr})"
            return masked(expr)
        raise ValueError(f"the lanes model has no {kind} cell")
