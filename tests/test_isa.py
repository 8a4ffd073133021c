"""The instruction set (rtl/isa.py): the numpy codecs and the Amaranth layouts agree, field by
field, and the wire format is what docs/pe.md says."""


import numpy as np
import pytest
from amaranth.hdl import Module, Signal
from amaranth.lib import data
from amaranth.sim import Simulator

from wse.rtl import isa
from wse.rtl.core import Core
from wse.rtl.core_params import CoreColors, CoreParams
from wse.rtl.router import Router
from wse.rtl.tile import Tile

from .layout_checks import assert_view_reads_back, random_fields

#: Every fixed layout of the fabric and its codec.
FIXED = [
    (isa.Wavelet, isa.WAVELET), (isa.ControlPayload, isa.CONTROL),
    (isa.ConfigPayload, isa.CONFIG), (isa.WeightPayload, isa.WEIGHT), (isa.LoadPayload, isa.LOAD),
    (isa.WordPayload, isa.WORD), (isa.AddrArg, isa.ADDR_ARG), (isa.ReadArg, isa.READ_ARG),
    (isa.CrArg, isa.CR_ARG), (isa.CrEntry, isa.CR_ENTRY), (isa.RouteStrap, isa.ROUTE_STRAP),
    (isa.SelectArg, isa.SELECT_ARG), (isa.MaskArg, isa.MASK_ARG),
]
#: ... and the ones that depend on a parameter.
ALL = FIXED + [(isa.core_strap_layout(rows, cols), isa.core_strap_codec(rows, cols))
              for rows, cols in ((1, 1), (3, 5), (64, 32))]
IDS = [codec.name + (f"[{codec.width}]" if codec.name == "CoreStrap" else "") for _, codec in ALL]


@pytest.mark.parametrize("layout, codec", ALL, ids=IDS)
def test_view_of_the_packed_word_reads_back_every_field(layout, codec):
    """Amaranth's simulator: a View of each word the codec packs reads back what was packed."""
    rng = np.random.default_rng(codec.width)
    n = 64
    assert_view_reads_back(layout, codec, random_fields(layout, codec, rng, n))


@pytest.mark.parametrize("layout, codec", ALL, ids=IDS)
def test_codec_packs_what_amaranth_const_packs(layout, codec):
    rng = np.random.default_rng(codec.width + 1)
    fields = random_fields(layout, codec, rng, 32, members_only=True)
    words = codec.pack(**fields)
    layout = data.Layout.cast(layout)
    for k in range(32):
        init = {name: int(values[k]) for name, values in fields.items()}
        assert layout.const(init).as_value().value == int(words[k]), init


@pytest.mark.parametrize("layout, codec", ALL, ids=IDS)
def test_round_trip(layout, codec):
    rng = np.random.default_rng(codec.width + 2)
    fields = random_fields(layout, codec, rng, 1000)
    back = codec.unpack(codec.pack(**fields))
    assert set(back) == set(fields)
    for name in fields:
        assert (back[name] == fields[name]).all(), name


@pytest.mark.parametrize("layout, codec", ALL, ids=IDS)
def test_fields_own_their_bits_and_nothing_else(layout, codec):
    covered = 0
    for name, (offset, width) in codec.fields.items():
        ones = -1 if codec.signed[name] else (1 << width) - 1
        word = int(codec.pack(**{name: ones}))
        assert word == ((1 << width) - 1) << offset, name
        assert covered & word == 0, name
        covered |= word
    padding = sum(f.width for n, f in data.Layout.cast(layout) if n.startswith("_"))
    assert covered.bit_count() + padding == codec.width == data.Layout.cast(layout).size


@pytest.mark.parametrize("codec, fields, message", [
    (isa.WEIGHT, {"slot": 1 << 16}, "WeightPayload.slot must fit in 16 bits, not 65536"),
    (isa.WEIGHT, {"value": 1 << 15}, "WeightPayload.value must fit in 16-bit signed, not 32768"),
    (isa.WEIGHT, {"value": [0, -(1 << 15) - 1]},
     "WeightPayload.value must fit in 16-bit signed, not -32769"),
    (isa.LOAD, {"value": np.array([1, 2, 40000])},
     "LoadPayload.value must fit in 16-bit signed, not 40000"),
    (isa.LOAD, {"_pad": 1}, "LoadPayload has no field '_pad'; fields are value, high"),
    (isa.WORD, {"value": 1 << 31}, "WordPayload.value must fit in 32-bit signed, not 2147483648"),
    (isa.ADDR_ARG, {"addr": -1}, "AddrArg.addr must fit in 16 bits, not -1"),
    (isa.READ_ARG, {"len": 4096}, "ReadArg.len must fit in 12 bits, not 4096"),
    (isa.READ_ARG, {"addr": np.array([3, 70000], dtype=np.uint64)},
     "ReadArg.addr must fit in 16 bits, not 70000"),
    (isa.CR_ARG, {"o": 1 << 25}, "CrArg.o must fit in 25 bits, not 33554432"),
    (isa.CR_ENTRY, {"raw": 2}, "CrEntry.raw must fit in 1 bits, not 2"),
    (isa.ROUTE_STRAP, {"tx": 32}, "RouteStrap.tx must fit in 5 bits, not 32"),
    (isa.core_strap_codec(3), {"row": 4}, "CoreStrap.row must fit in 2 bits, not 4"),
    (isa.core_strap_codec(3), {"out": 32}, "CoreStrap.out must fit in 5 bits, not 32"),
    (isa.core_strap_codec(3, 5), {"col": 8}, "CoreStrap.col must fit in 3 bits, not 8"),
])
def test_out_of_range_values_name_the_field(codec, fields, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        codec.pack(**fields)


def test_builders_raise_naming_the_field():
    with pytest.raises(ValueError, match=r"^ReadArg\.len must fit in 12 bits, not 5000$"):
        isa.read_data(0, 5000)
    with pytest.raises(ValueError, match=r"^CrArg\.o must fit in 25 bits, not -1$"):
        isa.cr_data(-1)


def test_sizes():
    for codec in (isa.WEIGHT, isa.LOAD, isa.WORD, isa.CONTROL, isa.CONFIG):
        assert codec.width == 32, codec.name
    for codec in (isa.ADDR_ARG, isa.READ_ARG, isa.CR_ARG, isa.SELECT_ARG, isa.MASK_ARG):
        assert codec.width == isa.ARG_BITS == 28, codec.name
    assert (isa.MASK_CHUNK, isa.MASK_MAX_CHUNKS, isa.MASK_MAX_COLS) == (16, 64, 64)
    # a MASK of column 3, chunk 2, gating tokens 32..47 to 0x00f1: op 9 in bits 31:28
    assert int(isa.mask_data(3, 2, 0xF1)) == (9 << 28) | (3 << 22) | (2 << 16) | 0xF1
    assert isa.CR_ENTRY.width == 29 and isa.ROUTE_STRAP.width == 10
    assert data.Layout.cast(isa.route_straps_layout(24)).size == 240
    assert isa.MAX_READ == 4095 and isa.MAX_ARG == (1 << 28) - 1
    assert isa.core_strap_codec(1).width == 37 and isa.core_strap_codec(64, 32).width == 46


@pytest.mark.parametrize("rows, n_out, n_feat, slot_bits", [(1, 16, 16, 4), (3, 4, 9, 4),
                                                             (2, 100, 8, 7), (1, 1, 1, 1)])
def test_a_carriage_returns_job_holds_a_slot_of_x_or_y(rows, n_out, n_feat, slot_bits):
    """The engine's job (``cr_job_layout``): the slot wide enough for ``Y`` (a CR) and for
    ``X`` (a CR_ACT, a CR_DELTA), the owner row, and a bit each for CR_OUT, CR_ACT (or
    CR_DELTA), CR_DELTA and the quiet flags; the engine's job adds the gate, a bit a token."""
    job = data.Layout.cast(isa.cr_job_layout(rows, n_out, n_feat))
    assert {name: field.width for name, field in job} == {
        "slot": slot_bits, "owner": max(1, (rows - 1).bit_length()), "raw": 1, "act": 1,
        "delta": 1, "quiet_n": 1, "quiet_s": 1}
    engine = data.Layout.cast(isa.engine_job_layout(rows, n_out, n_feat, 8))
    assert engine.size == job.size + 8


def test_codec_refuses_layouts_wider_than_a_word():
    with pytest.raises(ValueError, match=r"^Routes must be at most 64 bits wide to pack into "
                                         r"uint64, not 240$"):
        isa.Codec(isa.route_straps_layout(24), name="Routes")


def test_wire_format():
    """Pinned by hand, independently of the layouts (docs/pe.md)."""
    assert int(isa.weight_data(-2, 3)) == 3 << 16 | 0xFFFE
    assert int(isa.load_data(-1)) == 0xFFFF and int(isa.load_data(7)) == 7
    assert int(isa.word_data(-1)) == 0xFFFF_FFFF
    assert int(isa.addr_data(9)) == 5 << 28 | 9
    assert int(isa.read_data(0x8001, 5)) == 6 << 28 | 5 << 16 | 0x8001
    assert int(isa.cr_data(7)) == 4 << 28 | 7
    assert int(isa.cr_data(7, raw=True)) == 7 << 28 | 7
    assert int(isa.cr_data(7, act=True, skip=True)) == 11 << 28 | 1 << 27 | 7
    # the ones slot: a bias of -2 (an AXPY's op bits, 31:28, read 15 there)
    assert int(isa.weight_data(-2, isa.ONES_SLOT)) == 0xFFFF_FFFE
    assert int(isa.control_data(isa.ControlOp.TEARDOWN)) == 3 << 28
    assert int(isa.select_data(5)) == 8 << 28 | 5
    assert isa.route_straps_value(3, {1: (3, 4), 2: ("N", "ES")}) == \
        (3 | 4 << 5) << 10 | (1 | 0b110 << 5) << 20
    colors = CoreColors()
    params = CoreParams(rows=4, row=2, n_out=4, cols=3, col=1)
    want = sum(getattr(colors, name) << 5 * k for k, name in enumerate(
        ("cmd", "weight", "psum_from_n", "psum_from_s", "psum_to_s", "psum_to_n", "out")))
    assert isa.core_strap_value(params) == want | 2 << 35 | 1 << 37


def test_route_straps_read_back_through_the_array_view():
    rng = np.random.default_rng(5)
    n = 24
    routes = {int(c): (int(rx), int(tx)) for c, rx, tx in
              zip(rng.choice(n, 15, replace=False), rng.integers(0, 32, 15),
                  rng.integers(0, 32, 15))}
    word = isa.route_straps_value(n, routes)
    view = Signal(isa.route_straps_layout(n))
    got = {}

    async def testbench(ctx):
        ctx.set(view.as_value(), word)
        for c in range(n):
            got[c] = (ctx.get(view[c].rx), ctx.get(view[c].tx))

    sim = Simulator(Module())
    sim.add_testbench(testbench)
    sim.run()
    assert got == {c: routes.get(c, (0, 0)) for c in range(n)}


def test_core_strap_reads_back_through_the_view():
    params = CoreParams(rows=5, row=3, n_out=5, colors=CoreColors(1, 2, 3, 4, 5, 6, 7),
                        cols=6, col=4)
    strap = data.Const(isa.core_strap_layout(5, 6), isa.core_strap_value(params))
    assert {name: strap[name] for name in isa.core_strap_codec(5, 6).fields} == \
        {"cmd": 1, "weight": 2, "psum_from_n": 3, "psum_from_s": 4, "psum_to_s": 5,
         "psum_to_n": 6, "out": 7, "row": 3, "col": 4}


def test_the_hardware_takes_its_straps_as_these_layouts():
    params = CoreParams(rows=3, row=1, n_out=3, cols=2)
    core = Core(params, straps=True)
    router = Router(n_colors=20, cfg_color=31, straps=True)
    tile = Tile(params, straps=True, n_colors=20, cfg_color=31)
    assert core.signature.members["strap"].shape == isa.core_strap_layout(3, 2)
    assert router.signature.members["route_init"].shape == isa.route_straps_layout(20)
    assert router.signature.members["cfg_route_init"].shape == isa.RouteStrap
    assert tile.signature.members["strap_routes"].shape == isa.route_straps_layout(20)
    assert tile.signature.members["strap_cfg_route"].shape == isa.RouteStrap
