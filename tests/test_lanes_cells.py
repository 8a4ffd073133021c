"""The lanes model's C++ for single cells (:mod:`sim.lanes_cpp`) against Yosys's definitions of
them, written here in Python: random cells of every kind the model knows, widths 1 to 64 around
the 32- and 64-bit lane boundaries, signed and unsigned, each run on 16 lanes of random values;
and random operands built of slices, constants and repeated bits; multiplexers, flip-flops and
memories of one bit (the model's masks) and wider, clocked; and the exchanges between tiles of
meshes of several lane groups. One C++ program a test, compiled with and without AVX-512 (the
helpers' two versions)."""

import random
import subprocess

import pytest

from wse.sim.lanes_cpp import PRELUDE, Writer, lane_get, lane_set
from wse.sim.lanes_netlist import Tile, ordered, value_type

LANES = 16
WIDTHS = [1, 2, 3, 5, 8, 16, 31, 32, 33, 38, 63, 64]
TESTS = {"$eq", "$ne", "$lt", "$le", "$gt", "$ge", "$logic_and", "$logic_or", "$logic_not",
         "$reduce_or", "$reduce_and", "$reduce_bool"}
BINARY = ["$add", "$sub", "$mul", "$and", "$or", "$xor", "$shl", "$shr",
          "$eq", "$ne", "$lt", "$le", "$gt", "$ge", "$logic_and", "$logic_or"]
UNARY = ["$not", "$pos", "$logic_not", "$reduce_or", "$reduce_and", "$reduce_bool"]


def signed_value(value, width, signed):
    value &= (1 << width) - 1
    return value - (1 << width) if signed and value >> (width - 1) & 1 else value


def reference(kind, a, a_width, a_signed, b, b_width, b_signed, y_width):
    """Yosys's cell ``kind`` on the operands (Python integers of their widths)."""
    both = a_signed and b_signed
    ones = (1 << y_width) - 1
    if kind in ("$add", "$sub", "$mul", "$and", "$or", "$xor"):
        x, y = signed_value(a, a_width, both), signed_value(b, b_width, both)
        return {"$add": x + y, "$sub": x - y, "$mul": x * y, "$and": x & y, "$or": x | y,
                "$xor": x ^ y}[kind] & ones
    if kind in ("$eq", "$ne", "$lt", "$le", "$gt", "$ge"):
        x, y = signed_value(a, a_width, both), signed_value(b, b_width, both)
        return int({"$eq": x == y, "$ne": x != y, "$lt": x < y, "$le": x <= y, "$gt": x > y,
                    "$ge": x >= y}[kind])
    if kind in ("$shl", "$shr"):
        x = signed_value(a, a_width, a_signed) & ((1 << max(a_width, y_width)) - 1)
        return ((x << b) if kind == "$shl" else (x >> b)) & ones
    if kind in ("$logic_and", "$logic_or"):
        return int(bool(a) and bool(b)) if kind == "$logic_and" else int(bool(a) or bool(b))
    if kind in ("$not", "$pos"):
        x = signed_value(a, a_width, a_signed)
        return (~x if kind == "$not" else x) & ones
    if kind == "$logic_not":
        return int(a == 0)
    if kind == "$reduce_and":
        return int(a == (1 << a_width) - 1)
    return int(a != 0)          # $reduce_or, $reduce_bool


def run_module(module, values, tmp_path, flags):
    """Generate the module's cells for one group of lanes, set the inputs ``values[(signal,
    lane)]``, run once; ``{output port: [16 values]}``."""
    tile = Tile(module)
    writer = Writer(tile)
    lines = [PRELUDE.replace('#include "verilated.h"', ""), "#include <cstdio>"]
    types = {s.name: value_type(s.width) for s in tile.signals.values()}
    lines += [f"{types[s.name]} {s.name}[1];" for s in tile.signals.values()
              if s.kind != "comb" or s.stored]
    lines.append("int main() {")
    lines += ["  " + lane_set(types[name], f"{name}[0]", lane, f"{value}ull")
              for (name, lane), value in values.items()]
    lines.append("  for (int g = 0; g < 1; ++g) {")
    lines += ["    " + writer.node(node) for node in ordered(tile.nodes)]
    lines.append("  }")
    outputs = sorted(tile.outputs)
    lines += [f'  for (int l = 0; l < 16; ++l) std::printf("%llu\\n", (unsigned long long)'
              f"{lane_get(types[f'out_{name}'], f'out_{name}[0]', 'l')});" for name in outputs]
    lines.append("}")
    source = tmp_path / "cells.cpp"
    source.write_text("\n".join(lines))
    subprocess.run(["g++", "-std=c++17", "-O0", *flags, "-w", str(source), "-o",
                    str(tmp_path / "cells")], check=True)
    got = [int(x) for x in subprocess.run([str(tmp_path / "cells")], capture_output=True,
                                          text=True, check=True).stdout.split()]
    return {name: got[k * LANES:(k + 1) * LANES] for k, name in enumerate(outputs)}


class Netlist:
    """A Yosys-JSON module of input ports and cells, built bit by bit."""

    def __init__(self):
        self.next_bit, self.ports, self.cells = 2, {}, {}

    def bits(self, n):
        bits = list(range(self.next_bit, self.next_bit + n))
        self.next_bit += n
        return bits

    def input(self, name, width):
        bits = self.bits(width)        # "strap_" inputs: set once, no exchange between tiles
        self.ports[f"strap_{name}"] = {"direction": "input", "bits": bits}
        return bits

    def cell(self, name, kind, params, connections):
        self.cells[name] = {"type": kind, "parameters": params, "connections": connections}
        self.ports[name] = {"direction": "output", "bits": connections["Y"]}

    def module(self):
        return {"netnames": {}, "ports": self.ports, "cells": self.cells}


def binary(n, value):
    return format(value, f"0{n}b")


FLAGS = [pytest.param(["-march=native"], id="native"),
         pytest.param(["-march=native", "-mno-avx512f"], id="no-avx512")]


@pytest.mark.parametrize("flags", FLAGS)
def test_every_cell_kind_matches_yosys(tmp_path, flags):
    rng = random.Random(1)
    net, cases, values = Netlist(), [], {}
    for k in range(300):
        kind = rng.choice(BINARY + UNARY)
        a_width, b_width = rng.choice(WIDTHS), rng.choice(WIDTHS)
        if rng.random() < 0.2:         # one-bit operands: the model's masks
            a_width = b_width = 1
        if kind in ("$shl", "$shr"):
            b_width = rng.choice([1, 2, 3, 5, 6, 7])
        y_width = 1 if kind in TESTS else rng.choice(WIDTHS)
        a_signed = rng.random() < 0.5
        b_signed = False if kind in ("$shl", "$shr") else (
            a_signed if rng.random() < 0.7 else rng.random() < 0.5)   # mixed: unsigned
        params = {"A_SIGNED": binary(1, a_signed), "A_WIDTH": binary(32, a_width),
                  "Y_WIDTH": binary(32, y_width)}
        connections = {"A": net.input(f"a{k}", a_width), "Y": net.bits(y_width)}
        if kind in BINARY:
            connections["B"] = net.input(f"b{k}", b_width)
            params.update({"B_SIGNED": binary(1, b_signed), "B_WIDTH": binary(32, b_width)})
        net.cell(f"y{k}", kind, params, connections)
        cases.append((k, kind, a_width, a_signed, b_width, b_signed, y_width))
        operands = (("a", a_width), ("b", b_width)) if kind in BINARY else (("a", a_width),)
        for lane in range(LANES):
            for port, width in operands:
                value = rng.choice([0, 1, (1 << width) - 1, 1 << (width - 1),
                                    rng.getrandbits(width), rng.getrandbits(min(width, 7))])
                values[f"in_strap_{port}{k}", lane] = value & ((1 << width) - 1)
    got = run_module(net.module(), values, tmp_path, flags)
    bad = []
    for k, kind, a_width, a_signed, b_width, b_signed, y_width in cases:
        for lane in range(LANES):
            a = values[f"in_strap_a{k}", lane]
            b = values.get((f"in_strap_b{k}", lane), 0)
            want = reference(kind, a, a_width, a_signed, b, b_width, b_signed, y_width)
            if got[f"y{k}"][lane] != want:
                bad.append(f"{kind} A{a_width}{'s' if a_signed else 'u'}={a:#x} "
                           f"B{b_width}{'s' if b_signed else 'u'}={b:#x} Y{y_width}: "
                           f"want {want:#x}, got {got[f'y{k}'][lane]:#x}")
    assert not bad, f"{len(bad)} of {len(cases) * LANES}: " + "; ".join(bad[:5])


def test_operands_of_slices_constants_and_repeated_bits(tmp_path):
    """Operands that mix slices of signals of every width class, constants and one bit repeated
    (the crossbar's masks), extended by sign or zero or truncated (through ``$pos``/``$not``,
    and ``$and`` with one bit repeated)."""
    rng = random.Random(2)
    net, cases, values, bit_value = Netlist(), [], {}, {}
    sources = [net.input(f"p{k}", w) for k, w in enumerate([1, 7, 32, 33, 38, 64, 20])]
    for k, bits in enumerate(sources):
        for lane in range(LANES):
            value = rng.getrandbits(len(bits))
            values[f"in_strap_p{k}", lane] = value
            for i, bit in enumerate(bits):
                bit_value[bit, lane] = value >> i & 1
    for k in range(250):
        operand = []
        for _ in range(rng.randint(1, 6)):
            pick, source = rng.random(), rng.choice(sources)
            if pick < 0.2:
                operand += [rng.choice("01")] * rng.randint(1, 5)
            elif pick < 0.45:
                operand += [rng.choice(source)] * rng.randint(2, 40)
            else:
                i = rng.randrange(len(source))
                operand += source[i:rng.randint(i + 1, len(source))]
        operand = operand[:64]
        y_width = rng.choice([1, 3, 31, 32, 33, 40, 63, 64, len(operand)])
        signed, kind = rng.random() < 0.5, rng.choice(["$pos", "$not", "$and"])
        params = {"A_SIGNED": binary(1, signed), "A_WIDTH": binary(32, len(operand)),
                  "Y_WIDTH": binary(32, y_width)}
        connections = {"A": operand, "Y": net.bits(y_width)}
        mask = []
        if kind == "$and":          # and a bit repeated: as wide as the result, or not
            mask = [rng.choice(sources[0] + sources[2])] * rng.choice([y_width, 64, 3])
            params |= {"B_SIGNED": binary(1, signed), "B_WIDTH": binary(32, len(mask))}
            connections["B"] = mask
        net.cell(f"y{k}", kind, params, connections)
        cases.append((k, kind, operand, signed, y_width, mask))
    got = run_module(net.module(), values, tmp_path, ["-march=native"])
    for k, kind, operand, signed, y_width, mask in cases:
        for lane in range(LANES):
            a, b = (sum((int(bit) if isinstance(bit, str) else bit_value[bit, lane]) << i
                        for i, bit in enumerate(bits)) for bits in (operand, mask))
            want = reference(kind, a, len(operand), signed, b, len(mask), signed, y_width)
            assert got[f"y{k}"][lane] == want, (kind, len(operand), signed, y_width, lane)


@pytest.mark.parametrize("flags", FLAGS)
def test_multiplexers_with_one_bit_and_wide_cases(tmp_path, flags):
    """``$mux`` and ``$pmux`` (the first case whose select is set wins, else ``A``) of one bit,
    where the model works on masks, and wider, where a mask selects vectors lane by lane;
    selects taken from one-bit inputs and from bits inside wider ones."""
    rng = random.Random(3)
    net, cases, values = Netlist(), [], {}
    wide = net.input("sel", 40)
    for lane in range(LANES):
        values["in_strap_sel", lane] = rng.getrandbits(40)
    for k in range(120):
        kind, width = rng.choice(["$mux", "$pmux"]), rng.choice(WIDTHS)
        n = 1 if kind == "$mux" else rng.randint(2, 5)
        a = net.input(f"a{k}", width)
        b = [bit for s in range(n) for bit in net.input(f"b{k}_{s}", width)]
        selects = []
        for s in range(n):
            if rng.random() < 0.5:
                selects.append(("one", net.input(f"s{k}_{s}", 1)[0]))
            else:
                selects.append(("bit", rng.randrange(40)))
        s_bits = [bit if how == "one" else wide[bit] for how, bit in selects]
        params = {"WIDTH": binary(32, width)} | ({"S_WIDTH": binary(32, n)} if n > 1 else {})
        net.cell(f"y{k}", kind, params, {"A": a, "B": b, "S": s_bits, "Y": net.bits(width)})
        cases.append((k, width, n, selects))
        for lane in range(LANES):
            values[f"in_strap_a{k}", lane] = rng.getrandbits(width)
            for s in range(n):
                values[f"in_strap_b{k}_{s}", lane] = rng.getrandbits(width)
            for s, (how, _) in enumerate(selects):
                if how == "one":
                    values[f"in_strap_s{k}_{s}", lane] = int(rng.random() < 0.4)
    got = run_module(net.module(), values, tmp_path, flags)
    for k, width, n, selects in cases:
        for lane in range(LANES):
            want = values[f"in_strap_a{k}", lane]
            for s, (how, bit) in enumerate(selects):
                chosen = (values[f"in_strap_s{k}_{s}", lane] if how == "one"
                          else values["in_strap_sel", lane] >> bit & 1)
                if chosen:
                    want = values[f"in_strap_b{k}_{s}", lane]
                    break
            assert got[f"y{k}"][lane] == want, (k, width, n, selects, lane)


def random_operand(rng, sources, most=64):
    """Bits of an operand: slices of the sources (offset 0 or not), constants of one or several
    bits, one bit repeated."""
    operand = []
    for _ in range(rng.randint(1, 4)):
        pick, source = rng.random(), rng.choice(sources)
        if pick < 0.2:
            operand += [rng.choice("01") for _ in range(rng.randint(1, 5))]
        elif pick < 0.35:
            operand += [rng.choice(source)] * rng.randint(2, 9)
        else:
            i = rng.randrange(len(source))
            operand += source[i:rng.randint(i + 1, len(source))]
    return operand[:most]


@pytest.mark.parametrize("flags", FLAGS)
def test_tests_of_any_result_width_on_sliced_operands(tmp_path, flags):
    """Comparisons, logic and reductions whose result is wider than a bit (0 or 1, zero
    extended), and every cell with a one-bit result, on operands of slices (bit 0 of a run at
    an offset inside a wide signal), constants of several bits and repeated bits, one-bit
    operands included (signed: 1 is -1), signedness mixed."""
    rng = random.Random(5)
    net, cases, values, bit_value = Netlist(), [], {}, {}
    sources = [net.input(f"p{k}", w) for k, w in enumerate([1, 1, 7, 32, 33, 64, 20])]
    for k, bits in enumerate(sources):
        for lane in range(LANES):
            value = rng.choice([0, (1 << len(bits)) - 1, rng.getrandbits(len(bits))])
            values[f"in_strap_p{k}", lane] = value
            for i, bit in enumerate(bits):
                bit_value[bit, lane] = value >> i & 1
    for k in range(400):
        kind = rng.choice(BINARY + UNARY)
        narrow = rng.random() < 0.3
        a = random_operand(rng, sources, 1 if narrow else 64)
        b = random_operand(rng, sources, 1 if narrow else 64)
        if kind in ("$shl", "$shr"):
            b = b[:5]
        y_width = rng.choice([1, 1, 2, 5, 32, 33, 64])
        a_signed = rng.random() < 0.5
        b_signed = False if kind in ("$shl", "$shr") else (
            a_signed if rng.random() < 0.7 else rng.random() < 0.5)
        params = {"A_SIGNED": binary(1, a_signed), "A_WIDTH": binary(32, len(a)),
                  "Y_WIDTH": binary(32, y_width)}
        connections = {"A": a, "Y": net.bits(y_width)}
        if kind in BINARY:
            params |= {"B_SIGNED": binary(1, b_signed), "B_WIDTH": binary(32, len(b))}
            connections["B"] = b
        else:
            b = []
        net.cell(f"y{k}", kind, params, connections)
        cases.append((k, kind, a, a_signed, b, b_signed, y_width))
    got = run_module(net.module(), values, tmp_path, flags)
    bad = []
    for k, kind, a_bits, a_signed, b_bits, b_signed, y_width in cases:
        for lane in range(LANES):
            a, b = (sum((int(bit) if isinstance(bit, str) else bit_value[bit, lane]) << i
                        for i, bit in enumerate(bits)) for bits in (a_bits, b_bits))
            want = reference(kind, a, len(a_bits), a_signed, b, len(b_bits), b_signed,
                             y_width) & ((1 << y_width) - 1)
            if got[f"y{k}"][lane] != want:
                bad.append(f"{kind} A{len(a_bits)}{'s' if a_signed else 'u'}={a:#x} "
                           f"B{len(b_bits)}{'s' if b_signed else 'u'}={b:#x} Y{y_width}: "
                           f"want {want:#x}, got {got[f'y{k}'][lane]:#x}")
    assert not bad, f"{len(bad)} of {len(cases) * LANES}: " + "; ".join(bad[:5])


def run_clocked(module, values, state, tmp_path, flags):
    """Like :func:`run_module` for registers and memories: ``values[(signal, lane)]`` the
    inputs, ``state[(register, lane)]`` this cycle's registers (``q<k>``, ``rd<k>_<p>``); one
    settle and the writes; the registers' next values ``{register: [16]}`` and each memory's
    words after the writes ``{memory: [[16 lanes] a word]}``."""
    tile = Tile(module)
    writer = Writer(tile)
    types = {s.name: value_type(s.width) for s in tile.signals.values()}
    regs = [s.name for s in tile.signals.values() if s.kind == "state"]
    lines = [PRELUDE.replace('#include "verilated.h"', ""), "#include <cstdio>"]
    lines.append("struct State { " + " ".join(f"{types[r]} {r}[1];" for r in regs)
                 + " int pad; } s, n;")
    lines += [f"{types[x.name]} {x.name}[1];" for x in tile.signals.values()
              if x.kind not in ("comb", "state") or x.stored]
    for mem, (width, size, _, _) in tile.memories.items():
        lines.append(f"{'uint32_t' if width <= 32 else 'uint64_t'} {mem}[1][{size}][16];")
    writes = [x for x in tile.nodes if x.kind == "write"]
    for x in writes:
        t = "W" if x.width <= 32 else "D"
        lines.append(f"W wa_{x.name}[1]; {t} wd_{x.name}[1], we_{x.name}[1];")
    lines.append("int main() {")
    for mem, (_, _, words, _) in tile.memories.items():
        lines += [f"  for (int l = 0; l < 16; ++l) {mem}[0][{a}][l] = {word}ull;"
                  for a, word in enumerate(words)]
    lines += ["  " + lane_set(types[name], f"{name}[0]", lane, f"{value}ull")
              for (name, lane), value in values.items()]
    lines += ["  " + lane_set(types[name], f"s.{name}[0]", lane, f"{value}ull")
              for (name, lane), value in state.items()]
    lines.append("  for (int g = 0; g < 1; ++g) {")
    lines += ["    " + writer.node(x) for x in ordered(tile.nodes)]
    lines += [f"    write_words(&{x.memory}[g][0][0], wa_{x.name}[g], "
              f"{tile.memories[x.memory][1]}, wd_{x.name}[g], we_{x.name}[g]);" for x in writes]
    lines.append("  }")
    lines += [f'  for (int l = 0; l < 16; ++l) std::printf("%llu\\n", (unsigned long long)'
              f"{lane_get(types[r], f'n.{r}[0]', 'l')});" for r in regs]
    for mem, (_, size, _, _) in tile.memories.items():
        lines.append(f'  for (int a = 0; a < {size}; ++a) for (int l = 0; l < 16; ++l) '
                     f'std::printf("%llu\\n", (unsigned long long){mem}[0][a][l]);')
    lines.append("}")
    source = tmp_path / "clocked.cpp"
    source.write_text("\n".join(lines))
    subprocess.run(["g++", "-std=c++17", "-O0", *flags, "-w", str(source), "-o",
                    str(tmp_path / "clocked")], check=True)
    got = iter(int(x) for x in subprocess.run([str(tmp_path / "clocked")], capture_output=True,
                                              text=True, check=True).stdout.split())
    regs_out = {r: [next(got) for _ in range(LANES)] for r in regs}
    mems = {mem: [[next(got) for _ in range(LANES)] for _ in range(size)]
            for mem, (_, size, _, _) in tile.memories.items()}
    return regs_out, mems


@pytest.mark.parametrize("flags", FLAGS)
def test_flip_flops_of_one_bit_and_wider(tmp_path, flags):
    """``$dff``, ``$dffe``, ``$sdff``, ``$sdffe`` (the reset first) and ``$sdffce`` (the reset
    only while enabled) of one bit (masks) and wider, with either polarity of the enable and
    the reset, reset values, and D, EN, SRST taken from one-bit inputs, bits inside wider ones
    or constants."""
    rng = random.Random(6)
    net, cases, values, state, bit_value = Netlist(), [], {}, {}, {}
    sources = [net.input(f"p{k}", w) for k, w in enumerate([1, 1, 40, 64, 9])]

    def one_bit():
        if rng.random() < 0.1:
            return rng.choice("01")
        source = rng.choice(sources)
        return source[rng.randrange(len(source))]

    for k in range(60):
        kind, width = rng.choice(["$dff", "$dffe", "$sdff", "$sdffe", "$sdffce"]), \
            rng.choice([1, 1, 3, 32, 33, 64])
        d = net.input(f"d{k}", width) if width > 1 or rng.random() < 0.5 else [one_bit()]
        q = net.bits(width)
        params = {"WIDTH": binary(32, width), "CLK_POLARITY": "1"}
        connections = {"CLK": net.bits(1), "D": d, "Q": q}
        en_pol, srst_pol = rng.random() < 0.5, rng.random() < 0.5
        srst_value = rng.getrandbits(width)
        if kind in ("$dffe", "$sdffe", "$sdffce"):
            params["EN_POLARITY"] = binary(1, en_pol)
            connections["EN"] = [one_bit()]
        if kind.startswith("$sdff"):
            params |= {"SRST_POLARITY": binary(1, srst_pol),
                       "SRST_VALUE": binary(width, srst_value)}
            connections["SRST"] = [one_bit()]
        net.cells[f"f{k}"] = {"type": kind, "parameters": params, "connections": connections}
        net.ports[f"q{k}"] = {"direction": "output", "bits": q}
        # the register's signal: q<the cell's index> (the straps are ports, not cells)
        cases.append((f"q{k}", kind, width, d, connections, en_pol, srst_pol, srst_value))
        for lane in range(LANES):
            state[f"q{k}", lane] = rng.getrandbits(width)
    for name, port in net.ports.items():
        if name.startswith("strap_"):
            for lane in range(LANES):
                value = rng.getrandbits(len(port["bits"]))
                values[f"in_{name}", lane] = value
                for i, bit in enumerate(port["bits"]):
                    bit_value[bit, lane] = value >> i & 1

    def at(bit, lane):
        return int(bit) if isinstance(bit, str) else bit_value[bit, lane]

    regs, _ = run_clocked(net.module(), values, state, tmp_path, flags)
    bad = []
    for q, kind, width, d, connections, en_pol, srst_pol, srst_value in cases:
        for lane in range(LANES):
            dv = sum(at(bit, lane) << i for i, bit in enumerate(d))
            old = state[q, lane]
            en = "EN" not in connections or at(connections["EN"][0], lane) == en_pol
            srst = "SRST" in connections and at(connections["SRST"][0], lane) == srst_pol
            if kind == "$sdffce":
                want = (srst_value if srst else dv) if en else old
            else:
                want = srst_value if srst else dv if en else old
            if regs[q][lane] != want:
                bad.append(f"{kind} W{width} EN{int(en_pol)} SRST{int(srst_pol)} lane {lane}: "
                           f"want {want:#x}, got {regs[q][lane]:#x}")
    assert len(regs) == len(cases)
    assert not bad, f"{len(bad)}: " + "; ".join(bad[:5])


@pytest.mark.parametrize("flags", FLAGS)
def test_memories_of_one_bit_and_wider(tmp_path, flags):
    """Memories of one bit (the read word's bit 0 a mask, the write's data and enable vectors)
    and wider: a synchronous read port with an enable (kept where it is off), a combinational
    one (through a ``$dff``), a write port with enables bit by bit, from one-bit inputs and
    bits inside wider ones."""
    rng = random.Random(7)
    net, mems, state = Netlist(), [], {}
    sources = [net.input(f"p{k}", w) for k, w in enumerate([1, 1, 1, 40, 9])]

    def one_bit():
        source = rng.choice(sources)
        return source[rng.randrange(len(source))]

    cell = 0
    for width in (1, 1, 5, 32, 40):
        size, abits = 6, 3
        init = [rng.getrandbits(width) for _ in range(size)]
        sync_data, comb_data = net.bits(width), net.bits(width)
        ports = {name: net.input(f"{name}{cell}", abits) for name in ("ra", "ca", "wa")}
        wd = net.input(f"wd{cell}", width)
        we = ([one_bit()] * width if rng.random() < 0.5 else [one_bit() for _ in range(width)])
        ren = one_bit()
        params = {"MEMID": f"\\\\m{cell}", "WIDTH": binary(32, width), "SIZE": binary(32, size),
                  "ABITS": binary(32, abits), "OFFSET": binary(32, 0),
                  "INIT": "".join(binary(width, w) for w in reversed(init)),
                  "RD_PORTS": binary(32, 2), "WR_PORTS": binary(32, 1),
                  "RD_CLK_ENABLE": "01", "RD_CLK_POLARITY": "01",
                  "RD_TRANSPARENCY_MASK": "00", "RD_COLLISION_X_MASK": "00",
                  "RD_WIDE_CONTINUATION": "00", "RD_CE_OVER_SRST": "00",
                  "RD_ARST_VALUE": "x" * (2 * width), "RD_SRST_VALUE": "x" * (2 * width),
                  "RD_INIT_VALUE": "x" * (2 * width),
                  "WR_CLK_ENABLE": "1", "WR_CLK_POLARITY": "1", "WR_PRIORITY_MASK": "0",
                  "WR_WIDE_CONTINUATION": "0"}
        clk = net.bits(1)[0]
        connections = {"RD_CLK": [clk, "x"], "RD_EN": [ren, "1"], "RD_ARST": ["0", "0"],
                       "RD_SRST": ["0", "0"], "RD_ADDR": ports["ra"] + ports["ca"],
                       "RD_DATA": sync_data + comb_data, "WR_CLK": [clk], "WR_EN": we,
                       "WR_ADDR": ports["wa"], "WR_DATA": wd}
        net.cells[f"mem{cell}"] = {"type": "$mem_v2", "parameters": params,
                                   "connections": connections}
        mem_index = cell
        q = net.bits(width)
        net.cells[f"dff{cell}"] = {"type": "$dff", "parameters": {
            "WIDTH": binary(32, width), "CLK_POLARITY": "1"},
            "connections": {"CLK": [clk], "D": comb_data, "Q": q}}
        net.ports[f"q{cell}"] = {"direction": "output", "bits": q}
        net.ports[f"r{cell}"] = {"direction": "output", "bits": sync_data}
        mems.append((mem_index, width, init, ren, we))
        for lane in range(LANES):
            state[f"rd{mem_index}_0", lane] = rng.getrandbits(width)
        cell += 2
    values, bit_value = {}, {}
    for name, port in net.ports.items():
        if name.startswith("strap_"):
            for lane in range(LANES):
                value = rng.getrandbits(len(port["bits"]))
                if name[6:8] in ("ra", "ca", "wa"):
                    value %= 6
                values[f"in_{name}", lane] = value
                for i, bit in enumerate(port["bits"]):
                    bit_value[bit, lane] = value >> i & 1
    regs, words = run_clocked(net.module(), values, state, tmp_path, flags)
    bad = []
    for k, width, init, ren, we in mems:
        for lane in range(LANES):
            ra, ca, wa = (values[f"in_strap_{n}{k}", lane] for n in ("ra", "ca", "wa"))
            sync = init[ra] if bit_value[ren, lane] else state[f"rd{k}_0", lane]
            enable = sum(bit_value[bit, lane] << i for i, bit in enumerate(we))
            after = list(init)
            after[wa] = (init[wa] & ~enable) | (values[f"in_strap_wd{k}", lane] & enable)
            got = (regs[f"rd{k}_0"][lane], regs[f"q{k + 1}"][lane],
                   [w[lane] for w in words[f"mem{k}"]])
            if got != (sync, init[ca], after):
                bad.append(f"W{width} lane {lane}: want {(sync, init[ca], after)}, got {got}")
    assert not bad, f"{len(bad)}: " + "; ".join(bad[:3])


@pytest.mark.parametrize("flags", FLAGS)
def test_a_memory_wider_than_a_lane_is_cut_into_64_bit_slices(tmp_path, flags):
    """A memory of 100-bit words (a FIFO of carriage-return jobs with a 64-token gate) is two
    memories of the model, bits 0..63 and 64..99, each with every port: a synchronous read with
    an enable, a combinational one (through two ``$dff`` of 50 bits) and a write with enables
    bit by bit; read and written, they act as the one memory."""
    rng = random.Random(11)
    net, width, size, abits = Netlist(), 100, 6, 3
    init = [rng.getrandbits(width) for _ in range(size)]
    ra, ca, wa = (net.input(name, abits) for name in ("ra", "ca", "wa"))
    wd, flags_in = net.input("wd", width), net.input("f", 8)
    we = [rng.choice(flags_in) for _ in range(width)]
    ren = flags_in[0]
    sync_data, comb_data, clk = net.bits(width), net.bits(width), net.bits(1)[0]
    params = {"MEMID": "\\\\wide", "WIDTH": binary(32, width), "SIZE": binary(32, size),
              "ABITS": binary(32, abits), "OFFSET": binary(32, 0),
              "INIT": "".join(binary(width, w) for w in reversed(init)),
              "RD_PORTS": binary(32, 2), "WR_PORTS": binary(32, 1),
              "RD_CLK_ENABLE": "01", "RD_CLK_POLARITY": "01", "RD_TRANSPARENCY_MASK": "00",
              "RD_COLLISION_X_MASK": "00", "RD_WIDE_CONTINUATION": "00",
              "RD_CE_OVER_SRST": "00", "RD_ARST_VALUE": "x" * (2 * width),
              "RD_SRST_VALUE": "x" * (2 * width), "RD_INIT_VALUE": "x" * (2 * width),
              "WR_CLK_ENABLE": "1", "WR_CLK_POLARITY": "1", "WR_PRIORITY_MASK": "0",
              "WR_WIDE_CONTINUATION": "0"}
    net.cells["wide"] = {"type": "$mem_v2", "parameters": params, "connections": {
        "RD_CLK": [clk, "x"], "RD_EN": [ren, "1"], "RD_ARST": ["0", "0"], "RD_SRST": ["0", "0"],
        "RD_ADDR": ra + ca, "RD_DATA": sync_data + comb_data, "WR_CLK": [clk], "WR_EN": we,
        "WR_ADDR": wa, "WR_DATA": wd}}
    for k, lo in enumerate((0, 50)):
        q = net.bits(50)
        net.cells[f"dff{k}"] = {"type": "$dff", "parameters": {
            "WIDTH": binary(32, 50), "CLK_POLARITY": "1"},
            "connections": {"CLK": [clk], "D": comb_data[lo:lo + 50], "Q": q}}
        net.ports[f"q{k}"] = {"direction": "output", "bits": q}
    values, state = {}, {}
    for lane in range(LANES):
        lane_values = {"ra": rng.randrange(size), "ca": rng.randrange(size),
                       "wa": rng.randrange(size), "wd": rng.getrandbits(width),
                       "f": rng.getrandbits(8)}
        for name, value in lane_values.items():
            if name == "wd":           # an input wider than 64 bits comes in 64-bit limbs
                values["in_strap_wd_0", lane] = value & (1 << 64) - 1
                values["in_strap_wd_1", lane] = value >> 64
            else:
                values[f"in_strap_{name}", lane] = value
        for j in range(2):
            state[f"rd0_{j}_0", lane] = rng.getrandbits(64 if j == 0 else 36)
    tile = Tile(net.module())
    assert sorted(tile.memories) == ["mem0_0", "mem0_1"]
    assert [tile.memories[m][0] for m in ("mem0_0", "mem0_1")] == [64, 36]
    regs, words = run_clocked(net.module(), values, state, tmp_path, flags)
    bad = []
    for lane in range(LANES):
        get = {name: values[f"in_strap_{name}", lane] for name in ("ra", "ca", "wa", "f")}
        data = values["in_strap_wd_0", lane] | values["in_strap_wd_1", lane] << 64
        enable = sum((get["f"] >> flags_in.index(bit) & 1) << i for i, bit in enumerate(we))
        old = state["rd0_0_0", lane] | state["rd0_1_0", lane] << 64
        sync = init[get["ra"]] if get["f"] & 1 else old
        after = list(init)
        after[get["wa"]] = (init[get["wa"]] & ~enable) | (data & enable)
        got_sync = regs["rd0_0_0"][lane] | regs["rd0_1_0"][lane] << 64
        got_comb = regs["q1"][lane] | regs["q2"][lane] << 50      # the $dffs are cells 1, 2
        got_words = [words["mem0_0"][a][lane] | words["mem0_1"][a][lane] << 64
                     for a in range(size)]
        if (got_sync, got_comb, got_words) != (sync, init[get["ca"]], after):
            bad.append(f"lane {lane}")
    assert not bad, f"{len(bad)} lanes differ: " + ", ".join(bad[:5])


@pytest.mark.parametrize("shape", [(5, 5), (2, 9), (3, 7), (1, 3)])
@pytest.mark.parametrize("flags", FLAGS)
def test_exchanges_between_tiles_across_lane_groups(tmp_path, flags, shape):
    """The mesh's exchanges (``sim.lanes.generate``): every tile input that a neighbour's
    output feeds, words (lane permutations from each source group, blended) and one bit
    (shifted masks), on meshes of more than 16 tiles whose rows cross lane groups, and the edge
    ports' values; a stand-in tile whose outputs are bits of a strap of its own."""
    from wse.fabric.config import MeshConfig
    from wse.fabric.mesh import edge_ports
    from wse.rtl.wavelet import DATA_BITS
    from wse.sim.lanes import SHIM, generate

    rows, cols = shape
    config = MeshConfig(rows, cols, n_feat=8, n_tok=2, n_out=8)
    net, payload = Netlist(), DATA_BITS + 6
    ident = net.input("id", 64)
    for name, width in (("routes", 128), ("cfg_route", 8), ("core", 64)):
        net.input(name, width)
    net.ports["rst"] = {"direction": "input", "bits": net.bits(1)}
    net.ports["clk"] = {"direction": "input", "bits": net.bits(1)}
    sides = "nesw"
    for k, side in enumerate(sides):      # what a tile offers: bits of its id
        for name, bits in ((f"o_{side}__valid", [ident[40 + k]]),
                           (f"o_{side}__payload", ident[k:k + payload]),
                           (f"i_{side}__ready", [ident[50 + k]])):
            net.ports[name] = {"direction": "output", "bits": bits}
        for name, width in ((f"i_{side}__valid", 1), (f"i_{side}__payload", payload),
                            (f"o_{side}__ready", 1)):
            bits = net.bits(width)
            net.ports[name] = {"direction": "input", "bits": bits}
            net.ports[f"echo_{name}"] = {"direction": "output", "bits": bits}
    for name in ("idle", "error", "core_error", "overflow"):
        net.ports[name] = {"direction": "output", "bits": ["0"]}
    model, inputs, _ = generate(config, net.module())
    (tmp_path / "verilated.h").write_text(SHIM)
    (tmp_path / "model.h").write_text(model)
    rng = random.Random(8)
    n_tiles = rows * cols
    ids = [rng.getrandbits(64) for _ in range(n_tiles)]
    edge = {name: (rng.getrandbits(32), rng.getrandbits(8), rng.getrandbits(8),
                   rng.getrandbits(1)) for name in inputs}
    lines = ['#include "model.h"', "#include <cstdio>", "int main() {",
             "  static LaneMesh m(nullptr);"]
    lines += ["  " + lane_set("D", f"m.in_strap_id[{t // LANES}]", t % LANES, f"{v}ull")
              for t, v in enumerate(ids)]
    for name, (data, dest, user, valid) in edge.items():
        lines.append(f"  m.{name}_tdata = {data}u; m.{name}_tdest = {dest}; "
                     f"m.{name}_tuser = {user}; m.{name}_tvalid = {valid};")
    lines.append("  m.settle();")
    watched = [(f"echo_{kind.format(side)}", 1 if "payload" not in kind else payload)
               for side in sides
               for kind in ("i_{}__valid", "i_{}__payload", "o_{}__ready")]
    for name, width in watched:
        t = value_type(width)
        lines.append(f"  for (int l = 0; l < TILES; ++l) std::printf(\"%llu\\n\", "
                     f"(unsigned long long){lane_get(t, f'm.out_{name}[l / 16]', '(l % 16)')});")
    lines.append("}")
    (tmp_path / "mesh.cpp").write_text("\n".join(lines))
    subprocess.run(["g++", "-std=c++17", "-O0", *flags, "-w", f"-I{tmp_path}",
                    str(tmp_path / "mesh.cpp"), "-o", str(tmp_path / "mesh")], check=True)
    out = iter(int(x) for x in subprocess.run([str(tmp_path / "mesh")], capture_output=True,
                                              text=True, check=True).stdout.split())
    got = {name: [next(out) for _ in range(n_tiles)] for name, _ in watched}
    steps = {"n": (-1, 0), "e": (0, 1), "s": (1, 0), "w": (0, -1)}
    ports = {((r, c), d.name.lower(), way): name
             for name, way, (r, c), d in edge_ports(config)}
    bad = []
    for t in range(n_tiles):
        r, c = divmod(t, cols)
        for k, side in enumerate(sides):
            far = "nesw"[(k + 2) % 4]
            dr, dc = steps[side]
            if 0 <= r + dr < rows and 0 <= c + dc < cols:
                other = ids[(r + dr) * cols + c + dc]
                want = (other >> (40 + "nesw".index(far)) & 1,
                        other >> "nesw".index(far) & ((1 << payload) - 1),
                        other >> (50 + "nesw".index(far)) & 1)
            else:
                want = [0, 0, 0]
                if ((r, c), side, "in") in ports:
                    data, dest, user, valid = edge[ports[(r, c), side, "in"]]
                    want[0], want[1] = valid, data | (dest & 31) << DATA_BITS | (
                        user & 1) << (DATA_BITS + 5)
                if ((r, c), side, "out") in ports:
                    want[2] = 1
                want = tuple(want)
            have = tuple(got[f"echo_{kind.format(side)}"][t]
                         for kind in ("i_{}__valid", "i_{}__payload", "o_{}__ready"))
            if have != want:
                bad.append(f"tile {t} ({r}, {c}) side {side}: want {want}, got {have}")
    assert not bad, f"{len(bad)}: " + "; ".join(bad[:4])


@pytest.mark.parametrize("flags", FLAGS)
def test_operands_whose_signals_are_all_truncated_away(tmp_path, flags):
    """An operand whose only signal bits lie above a 32-bit lane (constants below them),
    truncated to a result of at most 32 bits that keeps none of them: the constants alone.
    (``Writer.value`` emitted ``()`` here: no term, yet ``signals`` set.)"""
    rng = random.Random(9)
    net, cases, values = Netlist(), [], {}
    one, wide = net.input("one", 1), net.input("wide", 9)
    for lane in range(LANES):
        values["in_strap_one", lane] = rng.getrandbits(1)
        values["in_strap_wide", lane] = rng.getrandbits(9)
    for k, (low, y_width, bit) in enumerate([(32, 32, one[0]), (32, 32, wide[3]),
                                             (40, 20, one[0]), (63, 1, wide[0])]):
        const = rng.getrandbits(low) | 1
        for c, value in enumerate((0, const)):
            a = [str(value >> i & 1) for i in range(low)] + [bit]
            net.cell(f"y{k}_{c}", "$pos", {"A_SIGNED": "0", "A_WIDTH": binary(32, len(a)),
                                           "Y_WIDTH": binary(32, y_width)},
                     {"A": a, "Y": net.bits(y_width)})
            cases.append((f"y{k}_{c}", value & ((1 << y_width) - 1)))
    got = run_module(net.module(), values, tmp_path, flags)
    for name, want in cases:
        assert got[name] == [want] * LANES, name
