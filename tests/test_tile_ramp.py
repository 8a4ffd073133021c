"""The tile's answer to its router's ramp, in Amaranth's simulator: for every router input, the
core's ``accept`` bit of the class of the head that input offers (``Router(ramp_accept=True)``,
``docs/pe.md``, "The ramp")."""

import numpy as np
from amaranth.sim import Simulator

from wse.rtl.core_params import CoreParams
from wse.rtl.route_table import RouteTable
from wse.rtl.tile import Tile
from wse.rtl.wavelet import WAVELET, ControlOp, Direction


def test_tile_answers_each_input_by_the_class_of_its_head():
    """Random colors of every class (commands, weights, both psum colors, a foreign one) on
    the four mesh inputs, outputs paced at random: each cycle, bit ``k`` of the router's
    ``ramp_accept`` is the core's ``accept`` bit for the class of ``ramp_offer[k]`` (``cmd`` or
    any other: a tile's psums take the bypass, so on the ramp a psum color is a foreign one),
    and the core's answer takes several values (a mapping from the wrong input fails)."""
    params = CoreParams(n_feat=16, n_tok=8, n_out=8, lanes=2)
    c = params.colors
    kinds = [c.cmd, c.weight, c.psum_from_n, c.psum_from_s, 20]
    routes = {k: ("NESW", "R") for k in kinds}
    routes[c.out] = ("R", "E")
    tile = Tile(params, routes=RouteTable(24, routes))
    read = (ControlOp.READ.value << 28) | (8 << 16)          # 8 words of X, replies out east
    classes = {c.cmd: 3}
    rng = np.random.default_rng(1)
    answers = set()

    async def bench(ctx):
        router = tile.router
        for cycle in range(1500):
            for d in ("n", "e", "s", "w"):
                i = getattr(tile, f"i_{d}")
                ctx.set(i.valid, bool(rng.random() < 0.6))
                color = int(rng.choice(kinds))
                # READs among the commands: their replies wait on the paced east output, and
                # the command FIFO fills meanwhile; SELECTs, so that ``cmd`` is sometimes
                # taken (discarded) when the other classes are not
                if color == c.cmd and rng.random() < 0.3:
                    word = int(WAVELET.pack(data=read, color=color, ctrl=1))
                elif color == c.cmd and rng.random() < 0.2:      # this column or another
                    select = (ControlOp.SELECT.value << 28) | int(rng.integers(2))
                    word = int(WAVELET.pack(data=select, color=color, ctrl=1))
                else:
                    word = int(WAVELET.pack(data=int(rng.integers(1 << 32)), color=color))
                ctx.set(i.payload.as_value(), word)
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


def test_a_psum_color_on_the_ramp_is_a_foreign_one():
    """A psum color the routes send to the ramp (the color plan never does) reaches the core
    as a foreign color: dropped, an error, and the psum FIFO stays empty; the same psum on the
    bypass (``i_n``) is taken into the FIFO without one."""
    params = CoreParams(n_feat=16, n_tok=8, n_out=8, lanes=2, row=1, rows=3)
    c = params.colors
    results = {}
    for port in ("e", "n"):
        tile = Tile(params, routes=RouteTable(24, {c.psum_from_n: ("E", "R")}))

        async def bench(ctx, tile=tile, port=port):
            i = getattr(tile, f"i_{port}")
            ctx.set(i.valid, 1)
            ctx.set(i.payload.as_value(), int(WAVELET.pack(data=7, color=c.psum_from_n)))
            await ctx.tick().until(i.ready)
            ctx.set(i.valid, 0)
            await ctx.tick().repeat(40)
            results[port] = (ctx.get(tile.core_error), ctx.get(tile.idle))

        sim = Simulator(tile)
        sim.add_clock(1e-6)
        sim.add_testbench(bench)
        sim.run()
    assert results["e"] == (1, 1), results
    assert results["n"][0] == 0, results
