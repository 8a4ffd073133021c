"""Round-robin arbiter, in Amaranth's simulator."""

import pytest
from amaranth.sim import Simulator

from wse.rtl.arbiter import RoundRobin


def simulate(count, requests_per_cycle, ready_per_cycle, hold=True):
    dut = RoundRobin(count, hold=hold)
    grants = []

    async def bench(ctx):
        for requests, ready in zip(requests_per_cycle, ready_per_cycle):
            ctx.set(dut.requests, requests)
            ctx.set(dut.ready, ready)
            grants.append(ctx.get(dut.grant) if ctx.get(dut.valid) else None)
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return grants


def test_rotates_among_persistent_requesters():
    grants = simulate(4, [0b1011] * 6, [1] * 6)
    assert grants == [0, 1, 3, 0, 1, 3]


def test_no_request_no_grant():
    assert simulate(3, [0, 0b100, 0], [1, 1, 1]) == [None, 2, None]


def test_grant_is_held_while_not_ready():
    # Requester 0 is granted and stalled; requester 1 appears but must wait its turn.
    grants = simulate(3, [0b001, 0b011, 0b011, 0b011, 0b011], [0, 0, 1, 1, 1])
    assert grants == [0, 0, 0, 1, 0]


def test_every_requester_served_within_count_transfers():
    grants = simulate(5, [0b11111] * 10, [1] * 10)
    assert sorted(grants[:5]) == [0, 1, 2, 3, 4]


def test_count_is_checked():
    with pytest.raises(ValueError, match="^Requester count must be a positive integer, not 0$"):
        RoundRobin(0)


def test_without_hold_the_offer_rotates_while_not_taken():
    grants = simulate(3, [0b011] * 5, [0, 0, 0, 1, 1], hold=False)
    assert grants == [0, 1, 0, 1, 0]
