"""The small components the long elaborates were split into, each alone in Amaranth's simulator
against a few lines of Python: the router input's candidate rotation, the route state's walk
after reset, the core's output register, and the bridge's outlet pick and credit counters.
Their parents' tests (``tests/test_router_parts.py``, ``tests/test_core_parts.py``,
``tests/test_bridge.py``) and the formal checks cover them in place."""

import itertools

import pytest
from amaranth.sim import Simulator

from wse.fpga.bridge import CreditCounter, OutletPick
from wse.rtl.core import OutputRegister
from wse.rtl.route_state import ResetWalk
from wse.rtl.router_input import CandidateRotation


def simulate(dut, bench):
    sim = Simulator(dut)
    sim.add_clock(1e-8, if_exists=True)
    sim.add_testbench(bench)
    sim.run()


def next_after(cand, content, n):
    """The reference: the nearest queue after ``cand`` (in a circle) with something in it."""
    for k in range(1, n):
        if content >> (cand + k) % n & 1:
            return (cand + k) % n
    return cand


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_candidate_rotation_moves_to_the_next_queue_with_content(n):
    dut = CandidateRotation(n)
    seen = []

    async def bench(ctx):
        for content, move in itertools.product(range(1 << n), (0, 1)):
            cand = ctx.get(dut.cand)
            ctx.set(dut.content, content)
            ctx.set(dut.move, move)
            expect = next_after(cand, content, n) if move else cand
            seen.append((ctx.get(dut.next), expect))
            await ctx.tick()
            assert ctx.get(dut.cand) == expect

    simulate(dut, bench)
    assert all(got == expect for got, expect in seen)
    assert n == 1 or any(got != 0 for got, _ in seen)


def test_reset_walk_visits_every_color_once_with_its_routes():
    n = 5
    initial = [[(c, 10 + c + k) for c in range(n)] for k in range(4)]
    last = [c % 4 for c in range(n)]
    dut = ResetWalk(n, initial=initial, last=last)
    visits = []

    async def bench(ctx):
        for _ in range(n + 3):
            if ctx.get(dut.walking):
                routes = ctx.get(dut.routes)
                visits.append((ctx.get(dut.walk), [(r.rx, r.tx) for r in routes],
                               ctx.get(dut.last)))
            await ctx.tick()
        assert not ctx.get(dut.walking)

    simulate(dut, bench)
    assert [v[0] for v in visits] == list(range(n))
    assert [v[1] for v in visits] == [[initial[k][c] for k in range(4)] for c in range(n)]
    assert [v[2] for v in visits] == last


def test_output_register_gives_the_first_input_priority():
    dut = OutputRegister()
    out = []

    async def bench(ctx):
        ctx.set(dut.o.ready, 1)
        ctx.set(dut.first.payload.data, 1)
        ctx.set(dut.second.payload.data, 2)
        for first, second in [(1, 1), (0, 1), (1, 0), (0, 0), (0, 0)]:
            ctx.set(dut.first.valid, first)
            ctx.set(dut.second.valid, second)
            assert (ctx.get(dut.first.ready), ctx.get(dut.second.ready)) == \
                (first, second & ~first)
            await ctx.tick()
            out.append(ctx.get(dut.o.payload.data) if ctx.get(dut.o.valid) else None)

    simulate(dut, bench)
    assert out == [1, 2, 1, None, None]


def test_outlet_pick_is_a_round_robin_over_the_columns():
    cols = 4
    dut = OutletPick(cols)

    async def bench(ctx):
        for valid, last in itertools.product(range(1 << cols), range(cols)):
            ctx.set(dut.valid, valid)
            ctx.set(dut.last, last)
            later = [c for c in range(last + 1, cols) if valid >> c & 1]
            first = [c for c in range(cols) if valid >> c & 1]
            assert ctx.get(dut.picking) == (valid != 0)
            if valid:
                assert ctx.get(dut.pick) == (later or first)[0]

    simulate(dut, bench)


def test_credit_counter_gives_the_lowest_row_owed_a_credit():
    rows, credit = 3, 2
    dut = CreditCounter(rows, 4, credit)

    async def bench(ctx):
        ctx.set(dut.took, 0b110)
        await ctx.tick()
        assert not ctx.get(dut.giving)
        await ctx.tick()
        ctx.set(dut.took, 0)
        assert (ctx.get(dut.giving), ctx.get(dut.give)) == (1, 1)
        ctx.set(dut.sent, 1)
        await ctx.tick()
        assert (ctx.get(dut.giving), ctx.get(dut.give)) == (1, 2)
        ctx.set(dut.sent, 0)
        ctx.set(dut.clear, 1)
        await ctx.tick()
        assert not ctx.get(dut.giving)

    simulate(dut, bench)
