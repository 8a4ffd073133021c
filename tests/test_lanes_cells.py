"""The lanes model's C++ for single cells (:mod:`sim.lanes_cpp`) against Yosys's definitions of
them, written here in Python: random cells of every kind the model knows, widths 1 to 64 around
the 32- and 64-bit lane boundaries, signed and unsigned, each run on 16 lanes of random values;
and random operands built of slices, constants and repeated bits. One C++ program a test,
compiled with and without AVX-512 (the memory helpers' two versions)."""

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
