"""Route tables and configuration wavelets."""

import pytest

from wse.rtl.route_table import Position, RouteTable, config_switch, config_write
from wse.rtl.wavelet import CONFIG, WAVELET, ConfigOp, ControlOp, Direction


def test_positions_from_strings_masks_and_directions():
    table = RouteTable(24, {3: ("W", "ES"), 4: [(0b01000, 0b00110), ([Direction.N], "R")]})
    assert table[3] == [Position(rx=Direction.W.bit, tx=Direction.E.bit | Direction.S.bit)]
    assert len(table[4]) == 2 and table[4][1].tx == Direction.R.bit
    assert table[5] == [] and 5 not in table


def test_a_json_pair_is_one_position():
    assert RouteTable(24, {3: ["W", "E"]})[3] == [Position("W", "E")]


def test_json_round_trip():
    table = RouteTable(24, {3: ("W", "ES"), 4: [("N", "S"), ("N", "R")]})
    assert RouteTable.from_json(24, table.to_json()) == table


@pytest.mark.parametrize("args, message", [
    ((0,), r"^n_colors must be an integer in 1\.\.32, not 0$"),
    ((24, {24: ("W", "E")}), r"^Route color must be an integer in 0\.\.23, not 24$"),
    ((24, {1: [("W", "E")] * 5}), r"^Color 1 must have 1\.\.4 switch positions, not 5$"),
    ((24, {1: []}), r"^Color 1 must have 1\.\.4 switch positions, not 0$"),
    ((24, {1: "WE"}), r"^Route of color 1 must be a position or a list of positions, not 'WE'$"),
    ((24, {1: [("W", "E", "S")]}), r"^A switch position of color 1 must be an \(rx, tx\) pair"),
])
def test_bad_tables_are_refused(args, message):
    with pytest.raises(ValueError, match=message):
        RouteTable(*args)


def test_config_wavelets_write_every_position_then_reset():
    table = RouteTable(24, {2: [("W", "E"), ("W", "S")]})
    words = table.config_wavelets(31, hops=3)
    fields = [WAVELET.unpack(w) for w in words]
    assert all(f["color"] == 31 for f in fields)
    cfg = [CONFIG.unpack(int(f["data"])) for f in fields]
    assert [int(c["op"]) for c in cfg] == [ConfigOp.WRITE_ROUTE.value] * 2 + [ConfigOp.SWITCH.value]
    assert [int(c["position"]) for c in cfg[:2]] == [0, 1]
    assert all(int(c["last"]) == 1 and int(c["hops"]) == 3 for c in cfg[:2])
    assert int(cfg[2]["cmd"]) == ControlOp.RESET.value


def test_config_arguments_are_checked():
    with pytest.raises(ValueError, match=r"^hops must be an integer in 0\.\.63, not 64$"):
        config_write(1, 0, "W", "E", last=0, hops=64)
    with pytest.raises(ValueError, match="position <= last"):
        config_write(1, 2, "W", "E", last=1)
    with pytest.raises(ValueError, match="^Switch command must be NOP, ADVANCE, RESET or TEARDOWN"):
        config_switch(1, ControlOp.CR)
