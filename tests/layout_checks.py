"""Checks shared by the layout tests (``test_isa.py``, ``test_bridge.py``): a numpy codec
(:class:`wse.rtl.wavelet.Codec`) and the Amaranth layout it is derived from agree field by field."""

import enum

import numpy as np
from amaranth.hdl import Module, Signal
from amaranth.lib import data
from amaranth.sim import Simulator

__all__ = ["enum_of", "random_fields", "assert_view_reads_back"]


def enum_of(layout, name):
    """The enum of field ``name`` of ``layout``, or ``None``."""
    shape = data.Layout.cast(layout)[name].shape
    return shape if isinstance(shape, type) and issubclass(shape, enum.Enum) else None


def random_fields(layout, codec, rng, n, *, members_only=False):
    """``n`` random values of every field of ``codec``; with ``members_only`` an enum field takes
    only its members' values (``layout.const`` refuses others)."""
    fields = {}
    for name, (_, width) in codec.fields.items():
        kind = enum_of(layout, name)
        if members_only and kind is not None:
            fields[name] = rng.choice([m.value for m in kind], n)
        elif codec.signed[name]:
            fields[name] = rng.integers(-(1 << (width - 1)), 1 << (width - 1), n)
        else:
            fields[name] = rng.integers(0, 1 << width, n, dtype=np.int64)
    return fields


def assert_view_reads_back(layout, codec, fields):
    """In Amaranth's simulator, a ``data.View`` of ``layout`` over each word ``codec`` packs
    from ``fields`` reads back every field's value (nested structs and enums as integers)."""
    words = codec.pack(**fields)
    view = Signal(layout)
    mismatches = []

    async def testbench(ctx):
        for k in range(len(words)):
            ctx.set(view.as_value(), int(words[k]))
            for name in codec.fields:
                member = getattr(view, name)
                plain = isinstance(member, data.View) or enum_of(layout, name)
                got = ctx.get(member.as_value() if plain else member)
                if got != fields[name][k]:
                    mismatches.append((k, name, got, int(fields[name][k])))

    sim = Simulator(Module())
    sim.add_testbench(testbench)
    sim.run()
    assert not mismatches, mismatches[:5]
