"""The core's storage parts alone, against small Python models: :class:`CounterBank` (the
counters in LUT RAM), :class:`LutFIFO`, :class:`PeekFIFO` with a peek part, and what a reset
leaves in :class:`AccBuffers`."""

import collections

import numpy as np
import pytest
from amaranth.hdl import ClockDomain, Module
from amaranth.lib.fifo import SyncFIFO
from amaranth.sim import Simulator

from wse.rtl.core_acc import AccBuffers
from wse.rtl.core_count import BANKED, LESS_BITS, CounterBank
from wse.rtl.core_params import CoreParams
from wse.rtl.peek_fifo import LutFIFO, PeekFIFO

from .core_harness import drain_tokens


def simulate(dut, bench, domain=None):
    """Run ``bench`` on ``dut`` (``domain``: an explicit ``sync`` whose ``rst`` the bench may
    drive)."""
    if domain is not None:
        m = Module()
        m.domains.sync = domain
        m.submodules.dut = dut
        dut = m
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


@pytest.mark.parametrize("n_tok,adders", [(1, 1), (8, 1), (64, 1), (1, 2), (8, 2)])
def test_counter_bank_counts_every_increment_and_reads_any_counter(n_tok, adders):
    """Random increments every cycle, the largest ones in bursts; reads (never two cycles in a
    row) of random counters with random ``less``; two resets on the way, one of them while
    every counter has pending counts. Each read returns the count before its cycle, less
    ``less``, modulo 2**32; counters start from 0 (not from what the LUT RAM still holds).
    With one adder or two (the READ engine's own), the same values."""
    dut = CounterBank(CoreParams(n_tok=n_tok), adders=adders)
    domain = ClockDomain("sync")
    rng = np.random.default_rng(n_tok)
    largest = {"macs_issued": n_tok, "macs_skipped_act": n_tok, "wavelets_in": 3}
    scale = {"macs_skipped_weight": n_tok}
    model = dict.fromkeys(BANKED, 0)
    checked = collections.Counter()

    async def bench(ctx):
        nonlocal model
        last_read = False
        for cycle in range(3000):
            if cycle in (1200, 2400):
                ctx.set(domain.rst, 1)
                await ctx.tick()
                ctx.set(domain.rst, 0)
                model = dict.fromkeys(BANKED, 0)
                last_read = False
            burst = (cycle // 50) % 2 == 0
            incs = {}
            for name in BANKED:
                top = largest.get(name, 1)
                v = top if burst else int(rng.integers(0, top + 1))
                incs[name] = v
                ctx.set(getattr(dut.inc, name), v)
            read = not last_read and rng.random() < 0.4
            ctx.set(dut.port.read, read)
            if read:
                k = int(rng.integers(0, len(BANKED)))
                less = int(rng.integers(0, 1 << LESS_BITS)) if rng.random() < 0.5 else 0
                ctx.set(dut.port.index, k)
                ctx.set(dut.port.less, less)
                assert ctx.get(dut.port.value) == (model[BANKED[k]] - less) % 2**32, \
                    (cycle, BANKED[k])
                checked[BANKED[k]] += 1
            else:
                ctx.set(dut.port.less, 0)
            last_read = read
            for name, v in incs.items():
                model[name] += v * scale.get(name, 1)
            await ctx.tick()

    simulate(dut, bench, domain)
    assert min(checked.values()) > 50


@pytest.mark.parametrize("depth", [1, 2, 3, 4, 8, 16])
def test_lut_fifo_is_a_sync_fifo(depth):
    """Same cycles as ``amaranth.lib.fifo.SyncFIFO`` under random traffic on both sides."""
    m = Module()
    dut = m.submodules.dut = LutFIFO(8, depth)
    ref = m.submodules.ref = SyncFIFO(width=8, depth=depth)
    rng = np.random.default_rng(depth)

    async def bench(ctx):
        for cycle in range(1000):
            write, read = (bool(v) for v in rng.random(2) < [0.5, 0.5])
            ctx.set(dut.w.valid, write)
            ctx.set(ref.w_en, write)
            ctx.set(dut.w.payload, cycle & 0xFF)
            ctx.set(ref.w_data, cycle & 0xFF)
            ctx.set(dut.r.ready, read)
            ctx.set(ref.r_en, read)
            assert ctx.get(dut.w.ready) == ctx.get(ref.w_rdy)
            assert ctx.get(dut.r.valid) == ctx.get(ref.r_rdy)
            if ctx.get(ref.r_rdy):
                assert ctx.get(dut.r.payload) == ctx.get(ref.r_data)
            await ctx.tick()

    simulate(m, bench)


@pytest.mark.parametrize("depth, held, copies", [
    (4, False, 1), (2, True, 1), (3, True, 1), (4, True, 1), (2, True, 2), (3, True, 2),
    (4, True, 2)])
def test_peek_fifo_keeps_a_peek_part_and_a_held_part(depth, held, copies):
    """With a ``peek_shape``, ``next`` is the ``w_peek`` written with the entry behind the head;
    with a ``held_shape``, ``held`` is the ``w_held`` written with the head, whatever was taken
    (none, one, two) and written in the cycle before, from one copy of the held parts or two
    (the second copy is read two entries behind the head, so only from depth 3 on does it
    matter); the head, the flags and take/take2 as without either."""
    dut = PeekFIFO(8, depth, peek_shape=4, held_shape=5 if held else None, held_copies=copies)
    rng = np.random.default_rng(depth + 10 * held + 100 * copies)
    model = collections.deque()         # (payload, peek part, held part)

    async def bench(ctx):
        written = 0
        for _ in range(800):
            assert ctx.get(dut.r.valid) == (len(model) >= 1)
            assert ctx.get(dut.r.next_valid) == (len(model) >= 2)
            assert ctx.get(dut.w.ready) == (len(model) < depth)
            if model:
                assert ctx.get(dut.r.head) == model[0][0]
                if held:
                    assert ctx.get(dut.r.held) == model[0][2]
            if len(model) >= 2:
                assert ctx.get(dut.r.next) == model[1][1]
            write, take = rng.random() < 0.6, int(rng.integers(0, 3))
            entry = (written & 0xFF, (written * 7) & 0xF, int(rng.integers(0, 32)))
            ctx.set(dut.w.valid, write)
            ctx.set(dut.w.payload, entry[0])
            ctx.set(dut.w_peek, entry[1])
            if held:
                ctx.set(dut.w_held, entry[2])
            ctx.set(dut.r.take, take == 1)
            ctx.set(dut.r.take2, take == 2)
            ready = len(model) < depth
            if take == 2 and len(model) >= 2:
                model.popleft()
                model.popleft()
            elif take == 1 and model:
                model.popleft()
            if write and ready:
                model.append(entry)
                written += 1
            await ctx.tick()

    simulate(dut, bench)


def test_acc_buffers_read_zero_after_a_reset():
    """The buffers' LUT RAM keeps its words across a reset, but a word not written since the
    reset reads 0: a reset in the middle of an output leaves nothing behind."""
    params = CoreParams(n_feat=1, n_tok=4, n_out=4, lanes=2, rows=2)
    dut = AccBuffers(params, 2)
    domain = ClockDomain("sync")
    got = []

    async def add(ctx, bank, index, value):
        mac = getattr(dut, f"mac{bank}")
        ctx.set(dut.issue, 1)
        await ctx.tick()
        ctx.set(dut.issue, 0)
        ctx.set(mac.read, 1)
        await ctx.tick()
        ctx.set(mac.read, 0)
        ctx.set(mac.write, 1)
        ctx.set(mac.write_index, index)
        ctx.set(mac.write_data, ctx.get(mac.data) + value)
        await ctx.tick()
        ctx.set(mac.write, 0)

    async def bench(ctx):
        for t in range(4):
            await add(ctx, t % 2, t // 2, 100 + t)
        ctx.set(domain.rst, 1)
        await ctx.tick()
        ctx.set(domain.rst, 0)
        await add(ctx, 1, 0, 7)                 # token 1 again, after the reset
        ctx.set(dut.retire, 1)
        await ctx.tick()
        ctx.set(dut.retire, 0)
        ctx.set(dut.job.ready, 1)
        await ctx.tick()
        ctx.set(dut.job.ready, 0)
        ctx.set(dut.drain.busy, 1)
        got.extend(await drain_tokens(ctx, dut, 4))    # reads each token, then adds it

    simulate(dut, bench, domain)
    assert got == [0, 7, 0, 0]


@pytest.mark.parametrize("n_buf", [2, 4])
def test_acc_buffers_say_which_slots_retired_cr_acts_write(n_buf):
    """``writes_slot``: retired buffers of CR_ACTs and CR_DELTAs (``act`` with ``delta``; and of
    CRs, which write no ``X``) into random slots, the engine done with one now and then (oldest
    first): for every slot, the flag says whether a buffer retired and not yet done is a CR_ACT's of
    it, as a queue of the retired jobs says."""
    params = CoreParams(n_feat=6, n_tok=2, n_out=2, lanes=1)
    dut = AccBuffers(params, n_buf)
    rng = np.random.default_rng(n_buf)
    delta_rng = np.random.default_rng(50 + n_buf)    # a CR_ACT's or a CR_DELTA's
    queue = collections.deque()                # (act, slot) of the retired buffers, oldest first
    checked = []

    async def bench(ctx):
        for _ in range(300):
            retire = len(queue) < n_buf - 1 and rng.random() < 0.5
            done = bool(queue) and rng.random() < 0.4
            job = (bool(rng.random() < 0.6), int(rng.integers(0, 6)))
            ctx.set(dut.retire, retire)
            ctx.set(dut.retire_job, {"act": job[0], "slot": job[1],
                                     "delta": job[0] and bool(delta_rng.random() < 0.5)})
            ctx.set(dut.drain.done, done)
            for slot in range(6):
                ctx.set(dut.slot, slot)
                want = any(act and s == slot for act, s in queue)
                assert ctx.get(dut.writes_slot) == want, (list(queue), slot)
                checked.append(want)
            await ctx.tick()
            if done:
                queue.popleft()
            if retire:
                queue.append(job)

    simulate(dut, bench)
    assert 100 < sum(checked) < len(checked) / 2


@pytest.mark.parametrize("adders", [0, 3, True])
def test_counter_bank_refuses_a_bad_adder_count(adders):
    with pytest.raises((TypeError, ValueError), match="adders"):
        CounterBank(CoreParams(), adders=adders)


@pytest.mark.parametrize("copies", [0, 3])
def test_peek_fifo_refuses_a_bad_copy_count(copies):
    message = rf"^held_copies must be an integer in 1\.\.2, not {copies}$"
    with pytest.raises(ValueError, match=message):
        PeekFIFO(8, 4, held_shape=5, held_copies=copies)
