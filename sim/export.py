"""Verilog export of Amaranth components (through the Yosys chosen in ``toolchain.env``)."""

from pathlib import Path

from amaranth.back import verilog

from . import toolchain

__all__ = ["export_verilog"]


def export_verilog(component, path, *, name="top", emit_src=False):
    """Write ``component`` as Verilog module ``name`` to ``path``; return the path.

    A component with a ``verilog_dependencies()`` method (a shared-tile mesh) gets that Verilog
    (the modules it instantiates) in the same file, first. ``emit_src``: keep Amaranth's ``src``
    attributes (the Python file and line of each statement), as a coverage build needs. The
    file is rewritten only when its text changes, so simulator builds that depend on it stay
    cached across runs.
    """
    toolchain.setup()
    text = verilog.convert(component, name=name, emit_src=emit_src)
    dependencies = getattr(component, "verilog_dependencies", None)
    if dependencies is not None:
        text = dependencies() + text
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return path
