"""The tile's answer to its router's ramp, in Amaranth's simulator: for every router input, the
core's ``accept`` bit of the class of the head that input offers (``Router(ramp_accept=True)``,
``docs/pe.md``, "The ramp")."""

import numpy as np
from amaranth.sim import Simulator

from wse.rtl.core_params import CoreParams
from wse.rtl.route_table import RouteTable
from wse.rtl.tile import Tile
from wse.rtl.wavelet import WAVELET, Direction


def test_tile_answers_each_input_by_the_class_of_its_head():
    """Random colors of every class (commands, weights, both psum colors, a foreign one) on
    the four mesh inputs, outputs paced at random: each cycle, bit ``k`` of the router's
    ``ramp_accept`` is the core's ``accept`` bit for the class of ``ramp_offer[k]``, and the
    core's answer takes several values (a mapping from the wrong input fails)."""
    params = CoreParams(n_feat=16, n_tok=8, n_out=8, lanes=2)
    c = params.colors
    kinds = [c.cmd, c.weight, c.psum_from_n, c.psum_from_s, 20]
    tile = Tile(params, routes=RouteTable(24, {k: ("NESW", "R") for k in kinds}))
    classes = {c.psum_from_n: 1, c.psum_from_s: 2, c.cmd: 3}
    rng = np.random.default_rng(1)
    answers = set()

    async def bench(ctx):
        router = tile.router
        for cycle in range(400):
            for d in ("n", "e", "s", "w"):
                i = getattr(tile, f"i_{d}")
                ctx.set(i.valid, bool(rng.random() < 0.6))
                ctx.set(i.payload.as_value(), int(WAVELET.pack(
                    data=int(rng.integers(1 << 32)), color=int(rng.choice(kinds)))))
                ctx.set(getattr(tile, f"o_{d}").ready, bool(rng.random() < 0.3))
            accept = ctx.get(tile.core.accept)
            got = ctx.get(router.ramp_accept)
            for d in Direction:
                color = ctx.get(router.ramp_offer[d])
                want = (accept >> classes.get(color, 0)) & 1
                assert (got >> d) & 1 == want, f"cycle {cycle}, input {d.name}, color {color}"
            answers.add(accept)
            await ctx.tick()
        assert len(answers) > 2, answers

    sim = Simulator(tile)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
