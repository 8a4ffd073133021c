"""The stream stage of rtl/skid.py in Amaranth's simulator: the register stage at the bridge's
intakes, the same words in order at one a cycle, one cycle later, every output a register. And
the mesh configuration's choices reaching the tiles of either kind of mesh."""

import random

import pytest
from amaranth.back import rtlil
from amaranth.sim import Simulator

from wse.fabric.config import MeshConfig
from wse.fabric.mesh import Mesh
from wse.rtl.skid import RegisterStage


def run(offers, readies, stage=RegisterStage):
    """Offer the words of ``offers`` in order (each held until taken) with ``o.ready`` from
    ``readies``, checking within every cycle that ``i.ready`` does not follow ``o.ready``;
    one record per cycle."""
    dut = stage(16)
    log = []

    async def bench(ctx):
        pending = list(offers)
        word = None
        for cycle, ready in enumerate(readies):
            if word is None and pending:
                word = pending.pop(0)
            ctx.set(dut.i.valid, word is not None)
            ctx.set(dut.i.payload, word or 0)
            before = ctx.get(dut.i.ready), ctx.get(dut.o.valid), ctx.get(dut.o.payload)
            ctx.set(dut.o.ready, ready)
            i_ready = ctx.get(dut.i.ready)
            assert i_ready == before[0], "i.ready followed o.ready within the cycle"
            assert (ctx.get(dut.o.valid), ctx.get(dut.o.payload)) == before[1:], \
                "o followed i or o.ready within the cycle"
            record = {"cycle": cycle, "in": word if word is not None and i_ready else None,
                      "i_ready": i_ready, "o_valid": ctx.get(dut.o.valid),
                      "o": ctx.get(dut.o.payload), "taken": ctx.get(dut.o.valid) and ready}
            log.append(record)
            if record["in"] is not None:
                word = None
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return log


@pytest.mark.parametrize("seed", range(6))
def test_register_stage_keeps_order_and_the_stream_rule_under_random_backpressure(seed):
    rng = random.Random(seed)
    offers = [rng.randrange(1, 1 << 16) for _ in range(300)]
    readies = [int(rng.random() < (0.3, 0.6, 0.9)[seed % 3]) for _ in range(800)]
    log = run(offers, readies, RegisterStage)
    got = [e["o"] for e in log if e["taken"]]
    assert got == offers[:len(got)] and len(got) > 100
    taken_in = [e["in"] for e in log if e["in"] is not None]
    assert taken_in == offers[:len(taken_in)]
    # the stream rule on ``o``, and never more than two words inside
    for before, after in zip(log, log[1:]):
        if before["o_valid"] and not before["taken"]:
            assert (after["o_valid"], after["o"]) == (1, before["o"]), "o changed before taken"
    inside = 0
    for e in log:
        assert inside <= 2
        inside += (e["in"] is not None) - bool(e["taken"])


def test_register_stage_runs_at_full_rate_one_cycle_later():
    offers = list(range(1, 21))
    log = run(offers, [1] * 22, RegisterStage)
    assert [(e["cycle"], e["o"]) for e in log if e["taken"]] == \
        [(c + 1, w) for c, w in enumerate(offers)]
    assert all(e["i_ready"] for e in log)


def test_register_stage_refills_without_a_bubble_after_a_stall():
    log = run([7, 8, 9, 10], [0, 0, 0, 1, 1, 1, 1, 1], RegisterStage)
    shown = [(e["o_valid"], e["o"], e["taken"]) for e in log]
    # 7 entered in cycle 0, 8 went to the spare in cycle 1 (7 refused); from cycle 3 one a cycle
    assert shown[1:7] == [(1, 7, 0), (1, 7, 0), (1, 7, 1), (1, 8, 1), (1, 9, 1), (1, 10, 1)]
    assert [e["i_ready"] for e in log[:5]] == [1, 1, 0, 0, 1]


@pytest.mark.parametrize("copies", [1, 2])
def test_mesh_config_reaches_the_core_of_either_kind_of_tile(copies):
    """``held_copies`` and ``counter_adders`` reach the core of a per-position tile and of the
    strapped tile a shared-tile mesh instantiates."""
    config = MeshConfig(rows=2, cols=2, held_copies=copies, counter_adders=3 - copies)
    mesh = Mesh(config, shared_tile=False)
    for tile in (mesh.tile(1, 0), mesh.strapped_tile()):
        assert (tile.core.held_copies, tile.core.counter_adders) == (copies, 3 - copies)
    # and the core builds the second copy (a memory of its own) only when asked
    text = rtlil.convert(mesh.strapped_tile().core)
    assert ("held_1" in text) == (copies == 2)


@pytest.mark.parametrize("slots", [True, False])
def test_tag_slots_reach_the_router_of_either_kind_of_tile(slots):
    """``tag_slots`` reaches the router of a per-position tile and of the strapped tile, and
    with 2-deep queues only True builds the memories of tags per slot."""
    config = MeshConfig(rows=2, cols=2, depth=2, tag_slots=slots)
    mesh = Mesh(config, shared_tile=False)
    for tile in (mesh.tile(1, 0), mesh.strapped_tile()):
        assert tile.router.tag_slots is slots
    text = rtlil.convert(mesh.strapped_tile().router)
    assert ("tags1" in text) == slots


@pytest.mark.parametrize("crossbar", ["and_or", "binary"])
def test_the_crossbar_choice_reaches_the_router_of_either_kind_of_tile(crossbar):
    """``crossbar`` reaches the router (and its crossbar) of a per-position tile and of the
    strapped tile."""
    config = MeshConfig(rows=2, cols=2, crossbar=crossbar)
    mesh = Mesh(config, shared_tile=False)
    for tile in (mesh.tile(1, 0), mesh.strapped_tile()):
        assert tile.router.crossbar == crossbar
        text = rtlil.convert(tile.router)
        assert ("o0_s1" in text) == (crossbar == "binary")
