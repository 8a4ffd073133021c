"""The mesh's color plan: every color lands where it must, and the checks explain failures."""

import pytest

from wse.fabric.config import MeshConfig, parse_mesh
from wse.fabric.routes import ColorPlan, Flow, RoutePlanError, find_cycle
from wse.rtl.route_table import RouteTable


@pytest.mark.parametrize("rows, cols", [(1, 1), (1, 5), (5, 1), (2, 2), (3, 4), (4, 4), (8, 8),
                                        (13, 13)])
def test_plan_checks_out_for_every_mesh_size(rows, cols):
    plan = ColorPlan(rows, cols)
    plan.check()
    colors = [plan.weight, plan.down(0), plan.down(1), plan.up(0), plan.up(1),
              *map(plan.out, range(rows)), *map(plan.cmd, range(cols))]
    assert len(set(colors)) == len(colors) == plan.n_colors <= plan.cfg_color


def test_rows_alternate_psum_colors_and_neighbours_agree():
    plan = ColorPlan(4, 2)
    for r in range(3):
        upper, lower = plan.core_colors(r, 1), plan.core_colors(r + 1, 1)
        assert upper.psum_to_s == lower.psum_from_n != lower.psum_to_s
        assert lower.psum_to_n == upper.psum_from_s != upper.psum_to_n


def test_too_many_colors_is_an_error_that_names_the_limit():
    with pytest.raises(ValueError, match=r"14x13 mesh needs 32 colors .* rows \+ cols must be "
                                         r"at most 26"):
        ColorPlan(14, 13)


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
    ((1, 0), 6, ("R", "E"), r"replies of core \(1,0\) \(color 6\) reaches tile \(1,1\) from W"),
    ((1, 2), 6, ("R", "E"), r"replies of core \(1,2\) \(color 6\) leaves the mesh at tile "
                            r"\(1,2\) going E, where there is no port"),
    ((0, 0), 8, ("W", "RE"), r"commands for core \(0,1\) \(color 8\) is sent to core \(0,0\), "
                             r"which does not take that color"),
    ((0, 0), 1, ("R", "SE"), r"psums south from core \(0,0\) \(color 1\) reaches tile \(0,1\)"),
])
def test_misrouted_colors_are_explained(tile, color, route, message):
    plan = ColorPlan(2, 3)       # colors: weight 0, psums 1-4, out 5-6, cmd 7-9
    plan.check()
    with pytest.raises(RoutePlanError, match=message):
        plan.check(_broken(plan, tile, color, route))


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
    assert [len(f.sinks) for f in weights] == [2, 2, 2]
    assert sum(f.what.startswith("replies") for f in flows) == 6


def test_mesh_config_parses_and_validates():
    assert parse_mesh("4x4") == (4, 4) and parse_mesh(" 2X3 ") == (2, 3)
    for bad in ("4", "0x4", "4x", "axb", "4x4x4"):
        with pytest.raises(ValueError, match="mesh must be ROWSxCOLS"):
            parse_mesh(bad)
    cfg = MeshConfig(2, 3, n_feat=8)
    assert MeshConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.core(1, 2).colors == cfg.plan.core_colors(1, 2) and cfg.core(1, 2).row == 1
    with pytest.raises(ValueError, match="n_tok must be a power of two"):
        MeshConfig(n_tok=6)
    with pytest.raises(ValueError, match="rows must be a positive integer"):
        MeshConfig(rows=0)
