"""The tile's netlist as the lanes model reads it (:mod:`sim.lanes`): Yosys's word-level cells,
each input a list of runs of driver bits, and a schedule in phases between the exchanges of
values across tiles."""

import json
import subprocess
import sys
from dataclasses import dataclass, field

from wse.rtl.wavelet import Direction

__all__ = ["Tile", "tile_netlist", "schedule", "ordered", "exchange_source", "value_type",
           "vector_type", "mask", "to_int", "FLOPS", "COMPARE"]

#: Yosys script: the tile as word-level cells, every memory whole with its read ports combinational
#: (registers stay registers), simplified as far as Yosys's `opt -full` goes.
YOSYS_SCRIPT = ("read_verilog -defer {path}; hierarchy -top {top}; proc; flatten; opt -full; "
                "wreduce; opt -full; memory_collect; opt_clean; write_json {out}")

_UNARY = {"$not", "$logic_not", "$reduce_or", "$reduce_bool", "$reduce_and", "$pos"}
_BINARY = {"$and", "$or", "$xor", "$add", "$sub", "$mul", "$shl", "$shr",
           "$eq", "$ne", "$lt", "$le", "$gt", "$ge", "$logic_and", "$logic_or"}
COMPARE = {"$eq": "==", "$ne": "!=", "$lt": "<", "$le": "<=", "$gt": ">", "$ge": ">="}
FLOPS = {"$dff", "$dffe", "$sdff", "$sdffe", "$sdffce"}


def tile_netlist(verilog, top, yosys, workdir):
    """The module ``top`` of ``verilog`` as Yosys's JSON (a dict), flattened to word-level
    cells; ``yosys`` is the command, ``workdir`` a folder for its files."""
    source, out = workdir / f"{top}.v", workdir / f"{top}.json"
    source.write_text(verilog)
    script = YOSYS_SCRIPT.format(path=source.name, top=top, out=out.name)
    done = subprocess.run([yosys, "-q", "-p", script], cwd=workdir, capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise RuntimeError(f"yosys could not read the tile for the lanes model:\n"
                           f"{done.stderr.strip()[-2000:]}")
    return json.loads(out.read_text())["modules"][top]


def to_int(value):
    if isinstance(value, int):
        return value
    return int(value.replace("x", "0").replace("z", "0"), 2) if value else 0


def mask(width):
    return (1 << width) - 1


def value_type(width):
    """How a signal of ``width`` bits is kept: one bit a lane in a mask ``M`` (lane ``l`` is
    bit ``l``), or a vector of 32-bit (``W``) or 64-bit (``D``) lanes."""
    return "M" if width == 1 else vector_type(width)


def vector_type(width):
    """The vector type that computes with ``width`` bits a lane."""
    return "W" if width <= 32 else "D"


@dataclass
class _Signal:
    """A value every lane has: a cell's output, a module input, a register."""
    name: str
    width: int
    kind: str                  # "comb", "state" (registers, sync reads), "input", "strap"
    cell: object = None        # the node that computes it (comb)
    stored: bool = False       # kept in the model (read across phases or from outside)
    phase: int = -1


@dataclass
class _Node:
    """Something evaluated per group of lanes: a combinational cell, a register's next value, an
    output port's value, a memory port's inputs."""
    name: str
    kind: str
    cell: dict
    inputs: dict = field(default_factory=dict)     # port -> runs
    out: _Signal = None
    deps: set = field(default_factory=set)         # signal names
    phase: int = -1


class Tile:
    """The tile's netlist read for code generation."""

    def __init__(self, module):
        self.signals = {}
        self.driver = {}             # bit -> (signal name, index)
        self.nodes = []
        self.memories = {}           # cell name -> (width, size, init words)
        self.init = {}               # bit -> 0/1 from the wires' init attributes
        for net in module["netnames"].values():
            init = net.get("attributes", {}).get("init")
            if init is not None:
                value = to_int(init) if isinstance(init, str) else int(init)
                for k, bit in enumerate(net["bits"]):
                    if isinstance(bit, int):
                        self.init[bit] = (value >> k) & 1
        self.inputs, self.outputs = {}, {}
        for name, port in module["ports"].items():
            if port["direction"] == "input":
                if name == "clk":
                    continue
                kind = ("strap" if name.startswith("strap_") else
                        "rst" if name == "rst" else "input")
                bits = port["bits"]
                limbs = [bits[k:k + 64] for k in range(0, len(bits), 64)]
                self.inputs[name] = []
                for k, limb in enumerate(limbs):        # wider than 64 bits: 64-bit limbs
                    sig = self._signal(f"in_{name}" + (f"_{k}" if len(limbs) > 1 else ""),
                                       len(limb), kind)
                    self.inputs[name].append(sig)
                    self._drive(limb, sig)
            else:
                if len(port["bits"]) > 64:
                    raise ValueError(f"the lanes model has no output port of more than 64 "
                                     f"bits ({name})")
                self.outputs[name] = port["bits"]
        cells = [c for c in module["cells"].values() if c["type"] != "$scopeinfo"]
        for k, cell in enumerate(cells):
            self._read_cell(k, cell)
        for name, bits in self.outputs.items():
            node = _Node(f"out_{name}", "port", None, {"A": bits})
            node.out = self._signal(f"out_{name}", len(bits), "comb", node)
            node.out.stored = True
            self.nodes.append(node)
        for node in self.nodes:
            node.inputs = {p: self._runs(bits) for p, bits in node.inputs.items()}
            node.deps = {r[1] for runs in node.inputs.values() for r in runs if r[0] == "sig"}

    def _signal(self, name, width, kind, cell=None):
        sig = _Signal(name, width, kind, cell)
        self.signals[name] = sig
        return sig

    def _drive(self, bits, sig):
        for k, bit in enumerate(bits):
            if isinstance(bit, int):
                self.driver[bit] = (sig.name, k)

    def _read_cell(self, k, cell):
        kind, conn, params = cell["type"], cell["connections"], cell["parameters"]
        name = params.get("MEMID", kind)
        if kind == "$mem_v2":
            width = to_int(params["WIDTH"])
            n_rd, n_wr = to_int(params["RD_PORTS"]), to_int(params["WR_PORTS"])
            unsupported = [
                what for what, bad in (
                    ("a write port not on the rising clock",
                     any(to_int(params[k]) != (1 << n_wr) - 1
                         for k in ("WR_CLK_ENABLE", "WR_CLK_POLARITY"))),
                    ("wide ports", to_int(params.get("RD_WIDE_CONTINUATION", "0"))
                     or to_int(params.get("WR_WIDE_CONTINUATION", "0"))),
                    ("a transparent read port", to_int(params["RD_TRANSPARENCY_MASK"])),
                    ("a read port's reset or initial value",
                     any(b != "0" for b in conn["RD_SRST"] + conn["RD_ARST"])
                     or params.get("RD_INIT_VALUE", "x").strip("x")),
                ) if bad]
            if unsupported:
                raise ValueError(f"the lanes model has no memory with {unsupported[0]} "
                                 f"({name})")
            clocked = to_int(params["RD_CLK_ENABLE"])
            for p in range(n_rd):
                if (clocked >> p) & 1 and not (to_int(params["RD_CLK_POLARITY"]) >> p) & 1:
                    raise ValueError(f"the lanes model has no memory with a read port on the "
                                     f"falling clock ({name})")
            # words wider than a lane's 64 bits: one memory per 64-bit slice of the word, each
            # with every port (the same addresses and enables, its own bits of the data)
            for j, lo in enumerate(range(0, width, 64)):
                suffix = f"_{j}" if width > 64 else ""
                self._read_memory(k, suffix, cell, lo, min(width, lo + 64))
            return
        if kind in FLOPS:
            width = to_int(params["WIDTH"])
            if width > 64:
                raise ValueError(f"the lanes model has no {kind} cell of more than 64 bits "
                                 f"({width})")
            if not to_int(params.get("CLK_POLARITY", "1")):
                raise ValueError(f"the lanes model has no {kind} cell on the falling clock")
            q = self._signal(f"q{k}", width, "state")
            q.init = sum(self.init.get(b, 0) << i for i, b in enumerate(conn["Q"])
                         if isinstance(b, int))
            self._drive(conn["Q"], q)
            node = _Node(f"nx_q{k}", kind, cell,
                         {p: conn[p] for p in ("D", "EN", "SRST") if p in conn})
            node.out = q
            self.nodes.append(node)
            return
        if kind not in _UNARY | _BINARY | {"$mux", "$pmux"}:
            raise ValueError(f"the lanes model has no {kind} cell")
        inputs = {p: conn[p] for p in ("A", "B", "S") if p in conn}
        width = len(conn["Y"])
        if kind == "$pmux":           # a case each: S{i} selects B{i}
            inputs = {"A": conn["A"]}
            for i, bit in enumerate(conn["S"]):
                inputs[f"S{i}"] = [bit]
                inputs[f"B{i}"] = conn["B"][i * width:(i + 1) * width]
        widest = max(width, *(len(bits) for bits in inputs.values()))
        if widest > 64:
            raise ValueError(f"the lanes model has no {kind} cell of more than 64 bits "
                             f"({widest})")
        node = _Node(f"n{k}", kind, cell, inputs)
        node.out = self._signal(node.name, width, "comb", node)
        self._drive(conn["Y"], node.out)
        self.nodes.append(node)


    def _read_memory(self, k, suffix, cell, lo, hi):
        """Bits ``lo .. hi - 1`` of every word of the memory ``cell`` (the ``k``-th cell), as a
        memory of the model (``mem{k}{suffix}``) with its read and write ports."""
        conn, params = cell["connections"], cell["parameters"]
        width, size = to_int(params["WIDTH"]), to_int(params["SIZE"])
        n_rd, n_wr = to_int(params["RD_PORTS"]), to_int(params["WR_PORTS"])
        abits, clocked = to_int(params["ABITS"]), to_int(params["RD_CLK_ENABLE"])
        part = hi - lo
        init = to_int(params.get("INIT", "0"))
        words = [(init >> (i * width + lo)) & mask(part) for i in range(size)]
        mem = f"mem{k}{suffix}"
        self.memories[mem] = (part, size, words, to_int(params.get("OFFSET", "0")))
        for p in range(n_rd):
            data = conn["RD_DATA"][p * width + lo:p * width + hi]
            addr = conn["RD_ADDR"][p * abits:(p + 1) * abits]
            if (clocked >> p) & 1:
                sig = self._signal(f"rd{k}{suffix}_{p}", part, "state")
                node = _Node(f"nx_rd{k}{suffix}_{p}", "sync_read", cell,
                             {"ADDR": addr, "EN": conn["RD_EN"][p:p + 1]})
            else:
                node = _Node(f"rd{k}{suffix}_{p}", "read", cell, {"ADDR": addr})
                sig = self._signal(node.name, part, "comb", node)
            node.out, node.memory = sig, mem
            self._drive(data, sig)
            self.nodes.append(node)
        for p in range(n_wr):
            node = _Node(f"wr{k}{suffix}_{p}", "write", cell, {
                "ADDR": conn["WR_ADDR"][p * abits:(p + 1) * abits],
                "DATA": conn["WR_DATA"][p * width + lo:p * width + hi],
                "EN": conn["WR_EN"][p * width + lo:p * width + hi]})
            node.memory, node.width = mem, part
            self.nodes.append(node)
    def _runs(self, bits):
        """``bits`` as runs: ``("const", value, n)`` or ``("sig", name, offset, n)``."""
        runs = []
        for bit in bits:
            if isinstance(bit, int):
                name, index = self.driver[bit]
                last = runs[-1] if runs else None
                if last and last[0] == "sig" and last[1] == name and last[2] + last[3] == index:
                    runs[-1] = ("sig", name, last[2], last[3] + 1)
                else:
                    runs.append(("sig", name, index, 1))
            else:
                value = 1 if bit == "1" else 0
                last = runs[-1] if runs else None
                if last and last[0] == "const":
                    runs[-1] = ("const", last[1] | (value << last[2]), last[2] + 1)
                else:
                    runs.append(("const", value, 1))
        return runs




def _opposite(d):
    return {Direction.N: Direction.S, Direction.S: Direction.N,
            Direction.E: Direction.W, Direction.W: Direction.E}[d]


def exchange_source(name):
    """The tile output port a tile input port ``name`` is fed from, and the direction of the
    neighbour it comes from: ``i_w__payload`` from the west neighbour's ``o_e__payload``."""
    side, member = name[2], name.split("__")[1]
    d = Direction[side.upper()]
    far = _opposite(d).name.lower()
    return d, (f"o_{far}__{member}" if name.startswith("i_") else f"i_{far}__{member}")


def schedule(tile):
    """Give every node a phase: the number of exchanges between tiles it must wait for."""
    nodes = {n.out.name: n for n in tile.nodes if n.out is not None and n.out.kind == "comb"}
    exchanges = {}
    for name, sigs in tile.inputs.items():
        if sigs[0].kind == "input":
            _, source = exchange_source(name)
            exchanges[sigs[0].name] = f"out_{source}"
    state = {}

    def phase_of(name, trail):
        sig = tile.signals[name]
        if sig.kind in ("state", "strap", "rst"):
            return 0
        if sig.kind == "input":
            return phase_of(exchanges[name], trail) + 1
        node = nodes[name]
        if state.get(name) == "busy":
            raise ValueError(f"combinational loop through {' -> '.join(trail + [name])}")
        if name not in state:
            state[name] = "busy"
            node.phase = max([phase_of(d, trail + [name]) for d in node.deps], default=0)
            state[name] = "done"
        return node.phase

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 20000))
    for node in tile.nodes:
        if node.out is not None and node.out.kind == "comb":
            phase_of(node.out.name, [])
        else:
            node.phase = max([phase_of(d, []) for d in node.deps], default=0)
    for sig, source in exchanges.items():
        tile.signals[sig].phase = nodes[source].phase + 1
    # a value read in another phase than its own is kept in the model
    for node in tile.nodes:
        for dep in node.deps:
            sig = tile.signals[dep]
            if sig.kind == "comb" and nodes[dep].phase != node.phase:
                sig.stored = True
    return exchanges


def ordered(nodes):
    """``nodes`` (one phase's) in dependency order."""
    by_name = {n.out.name: n for n in nodes if n.out is not None and n.out.kind == "comb"}
    done, order = set(), []

    def visit(node):
        stack = [(node, iter(sorted(node.deps)))]
        while stack:
            current, deps = stack[-1]
            for dep in deps:
                child = by_name.get(dep)
                if child is not None and id(child) not in done:
                    done.add(id(child))
                    stack.append((child, iter(sorted(child.deps))))
                    break
            else:
                stack.pop()
                order.append(current)

    for node in nodes:
        if id(node) not in done:
            done.add(id(node))
            visit(node)
    return order


