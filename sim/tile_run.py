"""Running the tile's cocotb testbench: the design the tests use and one call to run them."""

import json

from wse.rtl.core_params import CoreParams
from wse.rtl.route_table import RouteTable
from wse.rtl.tile import Tile

from .cocotb_run import build_once, run

__all__ = ["TEST_MODULE", "BENCH_MODULE", "tile_routes", "run_tile_tests"]

TEST_MODULE = "wse.tb.tile_tests"
BENCH_MODULE = "wse.tb.tile_bench"


def tile_routes(core):
    """One tile on its own: commands and weights come in from W, replies leave on E, psums
    arrive from N and S and leave towards them."""
    c = core.colors
    return RouteTable(24, {c.cmd: ("W", "R"), c.weight: ("W", "R"),
                           c.psum_from_n: ("N", "R"), c.psum_from_s: ("S", "R"),
                           c.psum_to_s: ("R", "S"), c.psum_to_n: ("R", "N"),
                           c.out: ("R", "E")})


def run_tile_tests(*, sim="verilator", testcase=None, module=TEST_MODULE, seed=1, waves=False,
                   extra_env=None, timeout=None, weights=None, router=None, **core):
    """Build a tile with ``CoreParams(**core)`` (defaults otherwise) and run ``module``.

    ``router``: the tile's router options (:class:`~rtl.tile.Tile` keywords such as ``depth``,
    ``tag_slots``, ``crossbar``). ``weights`` (the bench's stream length) only reaches the
    testbench."""
    cp = CoreParams(**{"n_feat": 16, "n_tok": 8, "n_out": 8, "lanes": 2, **core})
    params = cp.to_dict()
    router = dict(router or {})
    top = f"tile_l{cp.lanes}_r{cp.row}of{cp.rows}{'_bf16' if cp.fmt.is_float else ''}"
    if router:
        top += "_" + "_".join(f"{k}{int(v) if isinstance(v, bool) else v}"
                              for k, v in sorted(router.items()))
    built = build_once(lambda: Tile(cp, routes=tile_routes(cp), **router),
                       key=json.dumps([params, router], sort_keys=True), top=top, sim=sim,
                       waves=waves)
    extra = {"seed": seed} if weights is None else {"seed": seed, "weights": weights}
    return run(built, module=module, testcase=testcase, params={**params, **extra},
               seed=seed, name=f"{testcase or module.rsplit('.', 1)[-1]}-s{seed}",
               extra_env=extra_env, timeout=timeout)
