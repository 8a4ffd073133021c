"""C++ for the lanes model (:mod:`sim.lanes`): the vector types and memory helpers every model
starts with (:data:`PRELUDE`), and :class:`Writer`, the statement that computes each node of the
tile's netlist for one group of :data:`LANES` lanes."""

from .lanes_netlist import COMPARE, FLOPS
from .lanes_netlist import mask as _mask
from .lanes_netlist import to_int as _int
from .lanes_netlist import value_type as _type

__all__ = ["LANES", "PRELUDE", "Writer"]

#: Tiles evaluated by one vector operation (the vector types of :data:`PRELUDE` hold 16).
LANES = 16

PRELUDE = """\
// Written by sim/lanes.py for one mesh: do not edit.
#pragma once
#include <cstdint>
#include <cstring>
#include "verilated.h"

typedef uint32_t W __attribute__((vector_size(64)));
typedef int32_t SW __attribute__((vector_size(64)));
typedef uint64_t D __attribute__((vector_size(128)));
typedef int64_t SD __attribute__((vector_size(128)));
#define B2W(c) ((W)__builtin_convertvector((c), SW) & 1u)
#define B2D(c) ((D)__builtin_convertvector((c), SD) & 1ull)
#define TO_W(x) __builtin_convertvector((x), W)
#define TO_D(x) __builtin_convertvector((x), D)

// A memory is [words][16 lanes]; lane l reads word a[l] of its own column (0 past the end),
// and writes the bits of `e` from `d` where `e` is not 0.
#if defined(__AVX512F__)
#include <immintrin.h>
static const W IOTA = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
static inline __mmask16 lanes_in(W a, uint32_t size) {
    return _mm512_cmplt_epu32_mask((__m512i)a, _mm512_set1_epi32(int(size)));
}
static inline W read_words(const uint32_t *m, W a, uint32_t size) {
    return (W)_mm512_mask_i32gather_epi32(_mm512_setzero_si512(), lanes_in(a, size),
                                           (__m512i)(a * 16u + IOTA), m, 4);
}
static inline D read_words(const uint64_t *m, W a, uint32_t size) {
    __mmask16 ok = lanes_in(a, size);
    __m512i at = (__m512i)(a * 16u + IOTA);
    union { D d; __m512i h[2]; } out;
    out.h[0] = _mm512_mask_i32gather_epi64(_mm512_setzero_si512(), __mmask8(ok),
                                           _mm512_castsi512_si256(at), m, 8);
    out.h[1] = _mm512_mask_i32gather_epi64(_mm512_setzero_si512(), __mmask8(ok >> 8),
                                           _mm512_extracti64x4_epi64(at, 1), m, 8);
    return out.d;
}
static inline void write_words(uint32_t *m, W a, uint32_t size, W d, W e) {
    __mmask16 ok = lanes_in(a, size) & _mm512_test_epi32_mask((__m512i)e, (__m512i)e);
    if (!ok) return;                  // most cycles write few memories
    __m512i at = (__m512i)(a * 16u + IOTA);
    W old = (W)_mm512_mask_i32gather_epi32(_mm512_setzero_si512(), ok, at, m, 4);
    _mm512_mask_i32scatter_epi32(m, ok, at, (__m512i)((old & ~e) | (d & e)), 4);
}
static inline void write_words(uint64_t *m, W a, uint32_t size, D d, D e) {
    W any = B2W(__builtin_convertvector(e != 0, SW));
    __mmask16 ok = lanes_in(a, size) & _mm512_test_epi32_mask((__m512i)any, (__m512i)any);
    if (!ok) return;
    __m512i at = (__m512i)(a * 16u + IOTA);
    union { D d; __m512i h[2]; } old, data, enable;
    data.d = d;
    enable.d = e;
    for (int k = 0; k < 2; ++k) {
        __m256i half = k ? _mm512_extracti64x4_epi64(at, 1) : _mm512_castsi512_si256(at);
        __mmask8 some = __mmask8(ok >> (8 * k));
        old.h[k] = _mm512_mask_i32gather_epi64(_mm512_setzero_si512(), some, half, m, 8);
        __m512i merged = _mm512_or_si512(_mm512_andnot_si512(enable.h[k], old.h[k]),
                                          _mm512_and_si512(data.h[k], enable.h[k]));
        _mm512_mask_i32scatter_epi64(m, some, half, merged, 8);
    }
}
#else
template <class V, class E>
static inline V read_any(const E *m, W a, uint32_t size) {
    V out;
    for (int l = 0; l < 16; ++l) out[l] = a[l] < size ? m[a[l] * 16 + l] : 0;
    return out;
}
static inline W read_words(const uint32_t *m, W a, uint32_t size) {
    return read_any<W>(m, a, size);
}
static inline D read_words(const uint64_t *m, W a, uint32_t size) {
    return read_any<D>(m, a, size);
}
template <class V, class E>
static inline void write_words(E *m, W a, uint32_t size, V d, V e) {
    for (int l = 0; l < 16; ++l)
        if (e[l] && a[l] < size) m[a[l] * 16 + l] = (m[a[l] * 16 + l] & ~e[l]) | (d[l] & e[l]);
}
#endif
"""


#: Cells whose operands are both extended to the result's width, signed only when both are.
_BINARY_EXTENDED = {"$and", "$or", "$xor", "$add", "$sub", "$mul"}


class Writer:
    """C++ expressions for the tile's nodes, for one group of lanes ``g``."""

    def __init__(self, tile):
        self.tile = tile

    def ref(self, name):
        sig = self.tile.signals[name]
        if sig.kind == "state":                 # this cycle's registers; ``n.`` the next's
            return f"s.{name}[g]"
        return name if sig.kind == "comb" and not sig.stored else f"{name}[g]"

    def value(self, runs, width, signed=False):
        """The runs as a value of ``width`` bits (extended by sign or zero, or truncated)."""
        t = _type(width)
        bits = 32 if t == "W" else 64
        suffix = "u" if t == "W" else "ull"
        terms, const, pos, signals = [], 0, 0, False
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
            if offset:
                expr = f"({expr} >> {offset})"
            if _type(sig.width) != t:
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
            signals = True
            pos += n
        total = pos
        const &= _mask(bits)
        if not signals:
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

    def node(self, node):
        """The statement that computes ``node`` (its output's declaration or store)."""
        kind, i, out = node.kind, node.inputs, node.out
        if kind == "port":
            return f"{out.name}[g] = {self.value(i['A'], out.width)};"
        if kind == "read":
            _, size, _, _ = self.tile.memories[node.memory]
            addr = self.value(i["ADDR"], 32)
            return (f"{self._declare(out)} = read_words(&{node.memory}[g][0][0], {addr}, "
                    f"{size});")
        if kind == "sync_read":
            _, size, _, _ = self.tile.memories[node.memory]
            addr = self.value(i["ADDR"], 32)
            t = _type(out.width)
            return (f"{{ {t} m = ({t}){{}} - {self.value(i['EN'], out.width)}; "
                    f"n.{out.name}[g] = (read_words(&{node.memory}[g][0][0], {addr}, {size}) "
                    f"& m) | (s.{out.name}[g] & ~m); }}")
        if kind == "write":
            return (f"wa_{node.name}[g] = {self.value(i['ADDR'], 32)}; "
                    f"wd_{node.name}[g] = {self.value(i['DATA'], node.width)}; "
                    f"we_{node.name}[g] = {self.value(i['EN'], node.width)};")
        if kind in FLOPS:
            return f"n.{out.name}[g] = {self._flop(node)};"
        return f"{self._declare(out)} = {self._cell(node)};"

    def _declare(self, sig):
        return f"{sig.name}[g]" if sig.stored else f"{_type(sig.width)} {sig.name}"

    def _flop(self, node):
        p, i, q = node.cell["parameters"], node.inputs, node.out
        t, w = _type(q.width), q.width
        value = self.value(i["D"], w)
        if "EN" in i:
            en = self.value(i["EN"], w)
            if not _int(p.get("EN_POLARITY", "1")):
                en = f"({en} ^ 1)"
            en_mask = en if w == 1 else f"(({t}){{}} - {en})"
        if "SRST" in i:
            srst = self.value(i["SRST"], w)
            if not _int(p.get("SRST_POLARITY", "1")):
                srst = f"({srst} ^ 1)"
            srst_mask = srst if w == 1 else f"(({t}){{}} - {srst})"
            reset = f"(({t}){{}} + {_int(p['SRST_VALUE'])}{'u' if t == 'W' else 'ull'})"
        qref = f"s.{q.name}[g]"
        kind = node.kind
        if kind == "$dff":
            return value
        if kind == "$dffe":
            return f"(({value} & {en_mask}) | ({qref} & ~{en_mask}))"
        if kind == "$sdff":
            return f"(({reset} & {srst_mask}) | ({value} & ~{srst_mask}))"
        enabled = f"(({value} & {en_mask}) | ({qref} & ~{en_mask}))"
        if kind == "$sdffe":
            return f"(({reset} & {srst_mask}) | ({enabled} & ~{srst_mask}))"
        # $sdffce: the reset only while enabled
        reset_or_d = f"(({reset} & {srst_mask}) | ({value} & ~{srst_mask}))"
        return f"(({reset_or_d} & {en_mask}) | ({qref} & ~{en_mask}))"

    def _cell(self, node):
        kind, p, i, y = node.kind, node.cell["parameters"], node.inputs, node.out.width
        t = _type(y)
        suffix = "u" if t == "W" else "ull"
        a_signed = bool(_int(p.get("A_SIGNED", "0")))
        b_signed = bool(_int(p.get("B_SIGNED", "0")))
        if kind in _BINARY_EXTENDED:   # both operands extended by sign only if both are signed
            a_signed = b_signed = a_signed and b_signed
        a_width = _int(p.get("A_WIDTH", "0"))
        b_width = _int(p.get("B_WIDTH", "0"))
        masked = (lambda e: e) if y in (32, 64) else (lambda e: f"({e} & {_mask(y)}{suffix})")
        if kind == "$not":
            return masked(f"~{self.value(i['A'], y, a_signed)}")
        if kind == "$pos":
            return self.value(i["A"], y, a_signed)
        if kind in ("$logic_not", "$reduce_or", "$reduce_bool", "$reduce_and"):
            a = self.value(i["A"], a_width)
            sa = "u" if _type(a_width) == "W" else "ull"
            rhs = f"{_mask(a_width)}{sa}" if kind == "$reduce_and" else f"0{sa}"
            op = "!=" if kind in ("$reduce_or", "$reduce_bool") else "=="
            return f"B2{t}({a} {op} {rhs})"
        if kind in ("$and", "$or", "$xor"):
            op = {"$and": "&", "$or": "|", "$xor": "^"}[kind]
            return f"({self.value(i['A'], y, a_signed)} {op} {self.value(i['B'], y, b_signed)})"
        if kind in ("$add", "$sub", "$mul"):
            op = {"$add": "+", "$sub": "-", "$mul": "*"}[kind]
            return masked(f"({self.value(i['A'], y, a_signed)} {op} "
                          f"{self.value(i['B'], y, b_signed)})")
        if kind in ("$logic_and", "$logic_or"):
            w = max(a_width, b_width)
            op = "&" if kind == "$logic_and" else "|"
            return (f"B2{t}(({self.value(i['A'], w)} != 0) {op} "
                    f"({self.value(i['B'], w)} != 0))")
        if kind in COMPARE:
            w = max(a_width, b_width)
            signed = a_signed and b_signed
            ta = _type(w)
            a, b = self.value(i["A"], w, signed), self.value(i["B"], w, signed)
            if signed:
                bits = 32 if ta == "W" else 64
                a = f"((S{ta})({a} << {bits - w}) >> {bits - w})"
                b = f"((S{ta})({b} << {bits - w}) >> {bits - w})"
            cond = f"({a} {COMPARE[kind]} {b})"
            return f"B2{t}({cond})"
        if kind in ("$shl", "$shr"):
            if b_signed:
                raise ValueError("the lanes model has no signed shift amount")
            w = y if kind == "$shl" else max(a_width, y)
            tw = _type(w)
            bits = 32 if tw == "W" else 64
            if b_width > bits:
                raise ValueError(f"the lanes model has no {b_width}-bit shift amount")
            a, b = self.value(i["A"], w, a_signed), self.value(i["B"], w if b_width <= w
                                                                else bits)
            op = "<<" if kind == "$shl" else ">>"
            expr = f"(({a} {op} ({b} & {bits - 1})) & ({tw})({b} < {bits}))"
            if tw != t:
                expr = f"TO_{t}({expr})"
            return masked(expr)
        if kind in ("$mux", "$pmux"):
            # a select is 0 or 1: all ones or zeros, or (one bit wide) itself
            def select(port):
                s = self.value(i[port], y)
                return s if y == 1 else f"(({t}){{}} - {s})"

            if kind == "$mux":
                a, b, m = self.value(i["A"], y), self.value(i["B"], y), select("S")
                return f"(({b} & {m}) | ({a} & ~{m}))"
            expr = self.value(i["A"], y)
            n = sum(1 for k in i if k.startswith("S"))
            for k in reversed(range(n)):      # the first case that matches wins
                m = select(f"S{k}")
                expr = f"(({self.value(i[f'B{k}'], y)} & {m}) | ({expr} & ~{m}))"
            return expr
        raise ValueError(f"the lanes model has no {kind} cell")


