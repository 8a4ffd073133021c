"""The wavelet layout and its numpy codec."""

import numpy as np
import pytest
from amaranth.lib import data

from wse.rtl.wavelet import (
    CONFIG,
    CONTROL,
    WAVELET,
    WAVELET_BITS,
    ConfigPayload,
    ControlOp,
    ControlPayload,
    Direction,
    Wavelet,
    pack,
    unpack,
)


def test_wavelet_is_38_bits():
    assert WAVELET_BITS == 38
    assert data.Layout.cast(Wavelet).size == 38
    assert WAVELET.fields == {"data": (0, 32), "color": (32, 5), "ctrl": (37, 1)}


def test_payloads_fill_the_data_bits():
    assert data.Layout.cast(ControlPayload).size == 32
    assert data.Layout.cast(ConfigPayload).size == 32
    assert CONTROL.fields["op"] == (28, 4)
    assert CONFIG.fields["hops"] == (26, 6)


@pytest.mark.parametrize("codec", [WAVELET, CONTROL, CONFIG], ids=lambda c: c.name)
def test_every_bit_of_every_field_round_trips(codec):
    for name, (offset, width) in codec.fields.items():
        for bit in range(width):
            word = codec.pack(**{name: 1 << bit})
            assert int(word) == 1 << (offset + bit), (name, bit)
            fields = codec.unpack(word)
            assert fields[name] == 1 << bit
            assert all(v == 0 for k, v in fields.items() if k != name)


def test_vectorised_round_trip_of_random_wavelets():
    rng = np.random.default_rng(7)
    n = 100_000
    d = rng.integers(0, 1 << 32, n, dtype=np.int64)
    c = rng.integers(0, 32, n)
    k = rng.integers(0, 2, n)
    words = pack(d, c, k)
    assert words.dtype == np.uint64 and words.shape == (n,)
    assert int(words.max()) < 1 << 38
    d2, c2, k2 = unpack(words)
    assert (d2 == d).all() and (c2 == c).all() and (k2 == k).all()


def test_pack_broadcasts_scalars():
    words = pack(np.arange(4), 3, ctrl=1)
    assert list(unpack(words)[1]) == [3, 3, 3, 3]


def test_enum_fields_take_enum_members():
    word = CONTROL.pack(op=ControlOp.CR, arg=5)
    assert int(word) == (4 << 28) | 5
    assert CONTROL.unpack(word)["op"] == ControlOp.CR.value


@pytest.mark.parametrize("fields, message", [
    ({"data": 1 << 32, "color": 0}, "Wavelet.data must fit in 32 bits, not 4294967296"),
    ({"data": 0, "color": 32}, "Wavelet.color must fit in 5 bits, not 32"),
    ({"data": -1, "color": 0}, "Wavelet.data must fit in 32 bits, not -1"),
    ({"data": 0, "colour": 1}, "Wavelet has no field 'colour'; fields are data, color, ctrl"),
    ({"data": 2**64, "color": 0}, "Wavelet.data must fit in 32 bits, not 18446744073709551616"),
    ({"data": 1.7, "color": 0}, "Wavelet.data must be integers, not float64 values"),
])
def test_pack_rejects_values_that_do_not_fit(fields, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        WAVELET.pack(**fields)


def test_directions():
    assert [d.name for d in Direction] == ["N", "E", "S", "W", "R"]
    assert Direction.mask("NR") == 0b10001
    assert Direction.mask(Direction.N) == 0b00001 and Direction.mask([Direction.W]) == 0b01000
    assert Direction.from_mask(0b01010) == [Direction.E, Direction.W]
    assert Direction.W.opposite == Direction.E and Direction.R.opposite == Direction.R
    with pytest.raises(ValueError, match="^Route mask must be a 5-bit integer, not 32$"):
        Direction.mask(32)
    with pytest.raises(ValueError, match="^Port must be one of N, E, S, W, R, not 'x'$"):
        Direction.mask("Wx")
