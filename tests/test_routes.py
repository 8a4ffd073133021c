"""The mesh's color plan: every color lands where it must, and the checks explain failures."""

import pytest

from wse.fabric.config import MeshConfig, parse_mesh
from wse.fabric.routes import (
    MAX_MESH_COLORS,
    MAX_REPLY_COLORS,
    ColorPlan,
    Flow,
    RoutePlanError,
    find_cycle,
)
from wse.rtl.route_table import Position, RouteTable


@pytest.mark.parametrize("rows, cols", [(1, 1), (1, 5), (5, 1), (2, 2), (3, 4), (4, 4), (8, 8),
                                        (13, 13), (18, 2), (19, 3), (1, 64), (40, 2)])
def test_plan_checks_out_for_every_mesh_size(rows, cols):
    plan = ColorPlan(rows, cols)
    plan.check()
    K = min(rows, MAX_REPLY_COLORS)
    assert plan.reply_colors == K and plan.n_colors == 6 + K <= MAX_MESH_COLORS < plan.cfg_color
    colors = [plan.weight, plan.down(0), plan.down(1), plan.up(0), plan.up(1), plan.cmd,
              *map(plan.out, range(K))]
    assert len(set(colors)) == len(colors) == plan.n_colors
    assert {plan.out(r) for r in range(rows)} == set(colors[6:])
    assert all(plan.out(r) == plan.out(r + K) for r in range(rows - K))


def test_a_32x32_mesh_fits_24_colors_and_checks_out():
    plan = ColorPlan(32, 32)
    plan.check()
    assert plan.n_colors == MAX_MESH_COLORS == 24 and plan.reply_colors == 18
    assert all(max(color for color, _ in plan.routes(r, c)) < 24
               for r in range(32) for c in range(32))
    assert plan.read_groups() == [list(range(18)), list(range(18, 32))]
    assert plan.raw_rows() == list(range(7, 25))       # the middle rows: distinct colors
    # rows 18 apart merge their replies on the way south
    assert plan.routes(18, 3)[plan.out(18)][0] == Position("NR", "S")
    assert plan.routes(17, 3)[plan.out(17)][0] == Position("R", "S")
    assert plan.routes(17, 3)[plan.out(0)][0] == Position("N", "S")
    assert "replies of rows 0, 18" in plan.describe()


def test_a_mesh_too_wide_for_the_configuration_hops_is_an_error_that_names_the_limit():
    with pytest.raises(ValueError, match=r"^cols must be at most 64 \(configuration reaches a "
                                         r"tile hops routers east .* hops has 6 bits\), not 65$"):
        ColorPlan(2, 65)
    with pytest.raises(ValueError, match=r"cols must be at most 64"):
        MeshConfig(1, 65)
    with pytest.raises(ValueError, match=r"^reply_colors must be an integer in 1\.\.3, not 4$"):
        ColorPlan(3, 2, reply_colors=4)


def test_rows_alternate_psum_colors_and_neighbours_agree():
    plan = ColorPlan(4, 2)
    for r in range(3):
        upper, lower = plan.core_colors(r, 1), plan.core_colors(r + 1, 1)
        assert upper.psum_to_s == lower.psum_from_n != lower.psum_to_s
        assert lower.psum_to_n == upper.psum_from_s != upper.psum_to_n


def _broken(plan, tile, color, route):
    routes = {(r, c): plan.routes(r, c) for r in range(plan.rows) for c in range(plan.cols)}
    table = dict(routes[tile])
    if route is None:
        table.pop(color)
    else:
        table[color] = route
    routes[tile] = RouteTable(plan.n_colors, table)
    return routes


@pytest.mark.parametrize("tile, color, route, message", [
    ((0, 1), 0, None, r"weights of row 0 \(color 0\) reaches tile \(0,1\) from W, which has no "
                      r"route for it"),
    ((1, 1), 0, ("W", "R"), r"weights of row 1 \(color 0\) never reaches core \(1,2\)"),
    ((0, 2), 0, ("W", "RS"), r"weights of row 0 \(color 0\) reaches tile \(1,2\) from N"),
    ((1, 1), 5, ("W", "E"), r"commands of row 1 \(color 5\) never reaches core \(1,1\)"),
    ((1, 0), 7, ("R", "E"), r"replies of core \(1,0\) \(color 7\) reaches tile \(1,1\) from W"),
    ((1, 2), 7, ("R", "E"), r"replies of core \(1,2\) \(color 7\) leaves the mesh at tile "
                            r"\(1,2\) going E, where there is no port"),
    ((0, 2), 6, ("R", "W"), r"replies of core \(0,2\) \(color 6\) reaches tile \(0,1\) from E "
                            r"but is accepted there only from"),
    ((0, 0), 1, ("R", "SE"), r"psums south from core \(0,0\) \(color 1\) reaches tile \(0,1\)"),
])
def test_misrouted_colors_are_explained(tile, color, route, message):
    plan = ColorPlan(2, 3)       # colors: weight 0, psums 1-4, cmd 5, out 6-7
    plan.check()
    with pytest.raises(RoutePlanError, match=message):
        plan.check(_broken(plan, tile, color, route))


def test_a_command_that_reaches_a_core_of_another_row_is_rejected():
    plan = ColorPlan(2, 3)
    routes = _broken(plan, (0, 1), plan.cmd, ("W", "RES"))
    table = dict(routes[1, 1])
    table[plan.cmd] = ("WN", "RE")
    routes[1, 1] = RouteTable(plan.n_colors, table)
    with pytest.raises(RoutePlanError, match=r"^commands of row 0 \(color 5\) also reaches core "
                                             r"\(1,1\), core \(1,2\), which must not get it$"):
        plan.check(routes)


def test_a_select_that_picks_the_wrong_core_is_rejected():
    class Swapped(ColorPlan):
        def core_col(self, r, c):          # row 1's cores 1 and 2 both answer to SELECT 2
            return 2 if (r, c) == (1, 1) else c

    with pytest.raises(RoutePlanError, match=r"^commands for core \(1,1\) \(after SELECT 1 on "
                                             r"color 5\) are kept by no core: the column straps "
                                             r"of row 1 are \[0, 2, 2\]$"):
        Swapped(2, 3).check()


def test_rows_that_share_a_reply_color_never_reply_in_the_same_exchange():
    plan = ColorPlan(3, 2, reply_colors=2)        # rows 0 and 2 share color 6
    plan.check()
    assert plan.out(0) == plan.out(2) != plan.out(1)
    assert plan.read_groups() == [[0, 1], [2]] and plan.raw_rows() == [0, 1]

    class OneRead(ColorPlan):
        def read_groups(self):
            return [list(range(self.rows))]

    class RawEverywhere(ColorPlan):
        def raw_rows(self):
            return list(range(self.rows))

    with pytest.raises(RoutePlanError, match=r"^rows 0 and 2 reply in the same exchange \(READ "
                                             r"group 0 of 1\) on the same color 6: their words "
                                             r"would mix at the outlets$"):
        OneRead(3, 2, reply_colors=2).check()
    with pytest.raises(RoutePlanError, match=r"rows 0 and 18 reply in the same exchange \(raw "
                                             r"results\) on the same color 6"):
        RawEverywhere(32, 32).check()

    class Twice(ColorPlan):
        def read_groups(self):
            return [[0, 1], [1, 2]]

    with pytest.raises(RoutePlanError, match=r"READ groups must hold every row once, not "
                                             r"\[0, 1, 1, 2\]"):
        Twice(3, 2, reply_colors=2).check()


def test_a_color_that_loops_is_explained():
    plan = ColorPlan(2, 2)
    routes = _broken(plan, (0, 1), 0, ("W", "RS"))
    table = dict(routes[1, 1])
    table[0] = [("N", "W")]
    routes[1, 1] = RouteTable(plan.n_colors, table)
    table = dict(routes[1, 0])
    table[0] = [("E", "N")]
    routes[1, 0] = RouteTable(plan.n_colors, table)
    table = dict(routes[0, 0])
    table[0] = [("WS", "RE")]
    routes[0, 0] = RouteTable(plan.n_colors, table)
    with pytest.raises(RoutePlanError, match=r"weights of row 0 \(color 0\) loops"):
        plan.check(routes)


def test_a_dependency_cycle_between_queues_is_found_and_explained():
    # Two colors whose paths make a ring over four queues of a 2x2 mesh: a deadlock even
    # though neither color loops on its own.
    graph = {
        (0, 0, "S", 0): {(0, 1, "W", 0): "color a going E"},
        (0, 1, "W", 0): {(1, 1, "N", 0): "color a going S"},
        (1, 1, "N", 0): {(1, 0, "E", 0): "color b going W"},
        (1, 0, "E", 0): {(0, 0, "S", 0): "color b going N"},
        (1, 1, "W", 1): {},
    }
    cycle = find_cycle(graph)
    assert [why for _, why in cycle] == ["color a going E", "color a going S",
                                         "color b going W", "color b going N"]
    graph[(1, 0, "E", 0)] = {}
    assert find_cycle(graph) is None


def test_flows_cover_every_core():
    plan = ColorPlan(3, 2)
    flows = plan.flows()
    assert all(isinstance(f, Flow) for f in flows)
    weights = [f for f in flows if f.color == plan.weight]
    commands = [f for f in flows if f.color == plan.cmd]
    assert [len(f.sinks) for f in weights] == [len(f.sinks) for f in commands] == [2, 2, 2]
    assert sum(f.what.startswith("replies") for f in flows) == 6


def test_mesh_config_parses_and_validates():
    assert parse_mesh("4x4") == (4, 4) and parse_mesh(" 2X3 ") == (2, 3)
    for bad in ("4", "0x4", "4x", "axb", "4x4x4"):
        with pytest.raises(ValueError, match="mesh must be ROWSxCOLS"):
            parse_mesh(bad)
    cfg = MeshConfig(2, 3, n_feat=8)
    assert MeshConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.core(1, 2).colors == cfg.plan.core_colors(1, 2) and cfg.core(1, 2).row == 1
    assert (cfg.core(1, 2).col, cfg.core(1, 2).cols) == (2, 3)
    shared = MeshConfig(3, 2, reply_colors=2)
    assert MeshConfig.from_dict(shared.to_dict()) == shared and shared.plan.reply_colors == 2
    with pytest.raises(ValueError, match="n_tok must be a power of two"):
        MeshConfig(n_tok=6)
    with pytest.raises(ValueError, match="rows must be a positive integer"):
        MeshConfig(rows=0)
    for name in ("counter_adders", "held_copies"):
        two = MeshConfig(1, 1, **{name: 2})
        assert MeshConfig.from_dict(two.to_dict()) == two
        for bad in (0, 3, True, "2"):
            with pytest.raises(ValueError, match=rf"^{name} must be 1 or 2, not "):
                MeshConfig(**{name: bad})
    off = MeshConfig(1, 1, tag_slots=False)
    assert MeshConfig.from_dict(off.to_dict()) == off
    for bad in (0, 1, "False", None):
        with pytest.raises(ValueError, match=r"^tag_slots must be True or False, not "):
            MeshConfig(tag_slots=bad)
    binary = MeshConfig(1, 1, crossbar="binary")
    assert MeshConfig.from_dict(binary.to_dict()) == binary
    for bad in ("AND_OR", "pfumx", None):
        with pytest.raises(ValueError, match=r"^crossbar must be one of and_or, binary, not "):
            MeshConfig(crossbar=bad)
