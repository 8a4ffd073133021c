"""The core's parts, each alone in Amaranth's simulator against a small Python model:
:class:`RowSplit`, :class:`PeekFIFO`, :class:`InputSorter`, :class:`AxpyLane`,
:class:`AccBuffers`, :class:`ReadEngine` and :class:`PsumEngine`."""

import collections

import numpy as np
import pytest
from amaranth.sim import Simulator

from wse.rtl.core_acc import AccBuffers
from wse.rtl.core_input import InputSorter
from wse.rtl.core_lane import AxpyLane
from wse.rtl.core_params import COUNTER_BASE, COUNTERS, Y_BASE, CoreParams
from wse.rtl.core_read import SNAPSHOT, ReadEngine
from wse.rtl.core_rows import RowSplit
from wse.rtl.isa import CR_O_BITS, WAVELET, ReadArg, mask_data, select_data
from wse.rtl.peek_fifo import PeekFIFO
from wse.rtl.psum import PsumEngine

from .core_harness import drain_tokens


def simulate(dut, bench):
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


@pytest.mark.parametrize("rows", [1, 2, 3, 5, 6, 7, 12])
def test_row_split_is_divmod_without_a_divider(rows):
    """At the width of a carriage return's ``o`` (``CrArg``) and at a wider one."""
    for width in (CR_O_BITS, 28):
        _row_split_matches_divmod(rows, width)


def _row_split_matches_divmod(rows, width):
    dut = RowSplit(rows, width)
    rng = np.random.default_rng(rows)
    values = [0, 1, rows - 1, rows, 2**width - 1, 2**width - rows,
              *rng.integers(0, 2**width, 300)]
    got = []

    async def bench(ctx):
        for o in values:
            ctx.set(dut.o, int(o))
            got.append((ctx.get(dut.slot), ctx.get(dut.owner)))

    sim = Simulator(dut)
    sim.add_testbench(bench)
    sim.run()
    assert got == [divmod(int(o), rows) for o in values]


def test_row_split_checks_its_arguments():
    with pytest.raises(ValueError, match="rows must be"):
        RowSplit(0, 28)


@pytest.mark.parametrize("depth", [2, 3])
def test_peek_fifo_shows_two_entries_and_takes_one_or_two(depth):
    dut = PeekFIFO(8, depth)
    rng = np.random.default_rng(depth)
    model = collections.deque()

    async def bench(ctx):
        written = 0
        for _ in range(400):
            assert ctx.get(dut.r.valid) == (len(model) >= 1)
            assert ctx.get(dut.r.next_valid) == (len(model) >= 2)
            if model:
                assert ctx.get(dut.r.head) == model[0]
            if len(model) >= 2:
                assert ctx.get(dut.r.next) == model[1]
            write, take = rng.random() < 0.6, int(rng.integers(0, 3))
            ctx.set(dut.w.valid, write)
            ctx.set(dut.w.payload, written & 0xFF)
            ctx.set(dut.r.take, take == 1)
            ctx.set(dut.r.take2, take == 2)
            room = ctx.get(dut.w.ready)
            assert room == (len(model) < depth)
            await ctx.tick()
            for _ in range(min(take, len(model)) if take < 2 or len(model) >= 2 else 0):
                model.popleft()
            if write and room:
                model.append(written & 0xFF)
                written += 1

    simulate(dut, bench)


def _sorter_outputs(ctx, dut, colors, take_cmd, got):
    """What an :class:`InputSorter` hands out this cycle: the command FIFO's head (as the
    wavelet it came from: 30 stands for a foreign color) if ``take_cmd``, and each psum FIFO's
    head its reader takes, appended to ``got``."""
    if take_cmd and ctx.get(dut.cmd.valid):
        head = ctx.get(dut.cmd.head)
        got["cmd"].append(int(WAVELET.pack(
            data=head.data, ctrl=head.ctrl,
            color=colors.cmd if head.is_cmd else colors.weight if head.is_weight else 30)))
    for key, port in (("n", dut.psum_n), ("s", dut.psum_s)):
        if ctx.get(port.ready) and ctx.get(port.valid):
            got[key].append(ctx.get(port.payload))


@pytest.mark.parametrize("col, cols", [(0, 1), (2, 4)])
def test_input_sorter_sorts_by_color_and_gives_the_bypass_priority(col, cols):
    """Every class in order into its FIFO, the bypass first; SELECT words (args around this
    core's column, and one far beyond the strap's bits) choose whether ``cmd`` words are kept;
    discarded ones are always taken and never counted. MASKs on ``cmd`` and ``weight`` of
    another column (one that only differs past the strap's bits too) are discarded, on
    ``weight`` once the command FIFO has room; this column's are kept (on ``cmd`` while it is
    selected), a MASK on a foreign color always."""
    params = CoreParams(col=col, cols=cols)
    c = params.colors
    dut = InputSorter(params, cmd_depth=3, psum_depth=2)
    rng = np.random.default_rng(1 + col)
    colors = [c.cmd, c.cmd, c.weight, c.psum_from_n, c.psum_from_s, 30]
    want = {"cmd": [], "n": [], "s": []}
    got = {"cmd": [], "n": [], "s": []}
    selected = [0]          # the column last selected (column 0 after reset)
    discarded = [0]

    async def bench(ctx):
        for cycle in range(800):
            color = int(rng.choice(colors))
            word = int(WAVELET.pack(data=cycle, color=color, ctrl=0))
            select = color == c.cmd and rng.random() < 0.15
            masked = (not select and color not in (c.psum_from_n, c.psum_from_s)
                      and rng.random() < 0.2)
            if select:
                arg = int(rng.choice([col, col, col + 1, max(col - 1, 0), 1 << 20]))
                word = int(WAVELET.pack(data=select_data(arg), color=color, ctrl=1))
            elif masked:
                which = int(rng.choice([col, col, col + 1, col + 4, 63]))
                word = int(WAVELET.pack(data=mask_data(which, cycle % 64, cycle & 0xFFFF),
                                        color=color, ctrl=1))
            other_mask = masked and color in (c.cmd, c.weight) and which != col
            offers = [bool(v) for v in rng.random(3) < [0.8, 0.4, 0.4]]
            ctx.set(dut.i.valid, offers[0])
            ctx.set(dut.i.payload.as_value(), word)
            ctx.set(dut.psum_n_in.valid, offers[1])
            ctx.set(dut.psum_n_in.payload, 100000 + cycle)
            ctx.set(dut.psum_s_in.valid, offers[2])
            ctx.set(dut.psum_s_in.payload, 200000 + cycle)
            drain = [bool(v) for v in rng.random(3) < 0.5]
            ctx.set(dut.cmd.take, drain[0])
            ctx.set(dut.psum_n.ready, drain[1])
            ctx.set(dut.psum_s.ready, drain[2])
            accept = ctx.get(dut.accept)
            cls = {c.psum_from_n: 1, c.psum_from_s: 2, c.cmd: 3}.get(color, 0)
            assert ctx.get(dut.i.ready) == (accept >> cls & 1)
            mine = selected[0] == col
            if color == c.cmd and not mine:
                assert ctx.get(dut.i.ready), "a command for another column held up the row"
            keep = (color != c.cmd or (mine and not select)) and not other_mask
            took = [offers[0] and ctx.get(dut.i.ready), offers[1] and ctx.get(dut.psum_n_in.ready),
                    offers[2] and ctx.get(dut.psum_s_in.ready)]
            if took[0] and cls in (1, 2):     # a ramp psum only when its bypass offers none
                assert not offers[cls]
            assert ctx.get(dut.taken) == (int(took[0] and keep) | int(bool(took[1])) << 1
                                          | int(bool(took[2])) << 2)
            _sorter_outputs(ctx, dut, c, drain[0], got)
            await ctx.tick()
            if took[0] and select:
                selected[0] = arg
            elif took[0] and not keep:
                discarded[0] += 1
            elif took[0]:
                want[["cmd", "n", "s", "cmd"][cls]].append(cycle if cls in (1, 2) else word)
            if took[1]:
                want["n"].append(100000 + cycle)
            if took[2]:
                want["s"].append(200000 + cycle)

    simulate(dut, bench)
    for key in got:
        assert got[key] == want[key][:len(got[key])] and len(got[key]) > 20, key
    assert discarded[0] > 20


@pytest.mark.parametrize("col", [0, 2])
def test_input_sorter_keeps_its_promise_to_a_registered_ramp(col):
    """``registered_ramp=True``: the bench is the router's ramp register. Each cycle it reads
    ``accept`` (a promise for the next cycle) and loads a random word of a promised class, or
    none; the word is on ``i`` in the next cycle, where the sorter takes it (``i.ready`` is the
    constant 1, so nothing here can refuse it). Every word must come out of its FIFO in order,
    none lost: a broken promise shows as a lost word. SELECTs, other columns' MASKs and
    commands for another column are discarded, a ramp psum goes into its FIFO before the
    bypass's. The bench drains the command FIFO slowly, so the promise is tested at full
    FIFOs; every class gets through."""
    params = CoreParams(col=col, cols=4)
    c = params.colors
    dut = InputSorter(params, cmd_depth=3, psum_depth=2, registered_ramp=True)
    rng = np.random.default_rng(7 + col)
    cls_of = {c.psum_from_n: 1, c.psum_from_s: 2, c.cmd: 3}
    colors = [c.cmd, c.cmd, c.cmd, c.weight, c.weight, c.psum_from_n, c.psum_from_s, 30]
    want = {"cmd": [], "n": [], "s": []}
    got = {"cmd": [], "n": [], "s": []}
    selected = [0]
    offered = collections.Counter()

    async def bench(ctx):
        reg = None                              # (word, color, select arg, other mask) on i
        for cycle in range(2500):
            ctx.set(dut.i.valid, reg is not None)
            ctx.set(dut.i.payload.as_value(), reg[0] if reg else 0)
            offers = [bool(v) for v in rng.random(2) < 0.3]
            ctx.set(dut.psum_n_in.valid, offers[0])
            ctx.set(dut.psum_n_in.payload, 100000 + cycle)
            ctx.set(dut.psum_s_in.valid, offers[1])
            ctx.set(dut.psum_s_in.payload, 200000 + cycle)
            drain = [bool(v) for v in rng.random(3) < [0.3, 0.5, 0.5]]
            ctx.set(dut.cmd.take, drain[0])
            ctx.set(dut.psum_n.ready, drain[1])
            ctx.set(dut.psum_s.ready, drain[2])
            accept = ctx.get(dut.accept)
            took = [offers[0] and ctx.get(dut.psum_n_in.ready),
                    offers[1] and ctx.get(dut.psum_s_in.ready)]
            if reg is not None and reg[1] in (c.psum_from_n, c.psum_from_s):
                assert not took[cls_of[reg[1]] - 1], "the bypass went before the ramp's psum"
            _sorter_outputs(ctx, dut, c, drain[0], got)
            # the word on i: into its FIFO now (psums before this cycle's bypass word)
            if reg is not None:
                word, color, select, other_mask = reg
                if color in (c.psum_from_n, c.psum_from_s):
                    want["n" if color == c.psum_from_n else "s"].append(word & 0xFFFFFFFF)
                elif select is not None:
                    selected[0] = select
                elif not other_mask and (color != c.cmd or selected[0] == col):
                    want["cmd"].append(word)
            for key, t, base in (("n", took[0], 100000), ("s", took[1], 200000)):
                if t:
                    want[key].append(base + cycle)
            # the router: a word of a promised class, or none
            reg = None
            color = int(rng.choice(colors))
            if rng.random() < 0.85 and accept >> cls_of.get(color, 0) & 1:
                select = None
                other_mask = False
                if color == c.cmd and rng.random() < 0.35:
                    select = int(rng.choice([col, col + 1, 1 << 20]))
                    word = int(WAVELET.pack(data=select_data(select), color=color, ctrl=1))
                elif color in (c.cmd, c.weight) and rng.random() < 0.15:
                    which = int(rng.choice([col, col + 1]))
                    other_mask = which != col
                    word = int(WAVELET.pack(data=mask_data(which, 0, cycle & 0xFFFF),
                                            color=color, ctrl=1))
                else:
                    word = int(WAVELET.pack(data=cycle, color=color, ctrl=0))
                reg = (word, color, select, other_mask)
                offered[color] += 1
            await ctx.tick()

    simulate(dut, bench)
    for key in got:
        assert got[key] == want[key][:len(got[key])] and len(got[key]) > 20, key
    assert all(offered[color] > 20 for color in set(colors)), offered


@pytest.mark.parametrize("tpb", [1, 4, 8])
def test_axpy_lane_walks_nonzero_tokens_into_its_accumulators(tpb):
    """LOAD a bank, then AXPYs: each takes max(1, nonzero tokens) cycles and adds
    ``weight * x`` into the accumulators the test bench holds for the lane."""
    params = CoreParams(n_feat=3, n_tok=tpb, n_out=1)
    dut = AxpyLane(params)
    rng = np.random.default_rng(tpb)
    x = rng.integers(-300, 300, (3, tpb))
    x[rng.random(x.shape) < 0.4] = 0
    x[1] = 0                                      # a feature with no nonzero token
    acc = np.zeros(tpb, dtype=np.int64)
    weights = [(int(rng.integers(-300, 300)), int(rng.integers(0, 3))) for _ in range(12)]
    weights += [(0, 0), (5, 1)]
    cycles = []

    async def bench(ctx):
        for f in range(3):                        # LOAD, nonzero masks kept beside X
            for t in range(tpb):
                ctx.set(dut.feature, f)
                ctx.set(dut.load, 1)
                ctx.set(dut.load_index, t)
                ctx.set(dut.load_value, int(x[f, t]))
                ctx.set(dut.load_zero, int(x[f, t] == 0))
                await ctx.tick()
        ctx.set(dut.load, 0)
        for w, f in weights:
            ctx.set(dut.feature, f)
            assert ctx.get(dut.nonzero) == np.count_nonzero(x[f])
            ctx.set(dut.weight, w)
            ctx.set(dut.zero_weight, w == 0)
            cycles.append(await lane_walk(ctx, dut, acc))
        for _ in range(3):
            await lane_step(ctx, dut, acc)

    simulate(dut, bench)
    want = np.zeros(tpb, dtype=np.int64)
    for w, f in weights:
        want += w * x[f]
    assert list(acc) == list(want)
    assert cycles == [max(1, np.count_nonzero(x[f])) if w else 1 for w, f in weights]


@pytest.mark.parametrize("n_tok, lanes, bank", [(32, 1, 0), (64, 2, 1), (32, 4, 2), (8, 4, 3)])
def test_axpy_lane_walks_only_the_tokens_its_gate_lets_through(n_tok, lanes, bank):
    """The gate: MASK writes of 16 tokens (chunks with and without tokens of this bank, one past
    them all), resets to all ones, AXPYs between; each AXPY walks ``mask & gate`` of the bank
    (``nonzero`` counts them) and the accumulators get only those products."""
    params = CoreParams(n_feat=2, n_tok=n_tok, n_out=1, lanes=lanes)
    tpb = params.tpb
    dut = AxpyLane(params, bank)
    rng = np.random.default_rng(n_tok + bank)
    tokens = np.arange(bank, n_tok, lanes)             # bank index i is token i * lanes + bank
    x = rng.integers(-300, 300, (2, tpb))
    x[rng.random(x.shape) < 0.3] = 0
    gate = np.ones(n_tok, dtype=bool)
    acc, want = np.zeros(tpb, dtype=np.int64), np.zeros(tpb, dtype=np.int64)
    steps = []
    for _ in range(40):
        roll = rng.random()
        if roll < 0.4:
            steps.append(("mask", int(rng.integers(0, n_tok // 16 + 2)),
                          int(rng.integers(0, 1 << 16))))
        elif roll < 0.5:
            steps.append(("reset",))
        else:
            steps.append(("axpy", int(rng.integers(-300, 300)), int(rng.integers(0, 2))))
    got_cycles, want_cycles = [], []

    async def bench(ctx):
        for f in range(2):
            for i in range(tpb):
                ctx.set(dut.feature, f)
                ctx.set(dut.load, 1)
                ctx.set(dut.load_index, i)
                ctx.set(dut.load_value, int(x[f, i]))
                ctx.set(dut.load_zero, int(x[f, i] == 0))
                await ctx.tick()
        ctx.set(dut.load, 0)
        for step in steps:
            if step[0] == "mask":
                _, chunk, bits = step
                ctx.set(dut.gate_write, 1)
                ctx.set(dut.gate_arg, {"bits": bits, "chunk": chunk, "col": 0})
                await lane_step(ctx, dut, acc)
                ctx.set(dut.gate_write, 0)
                for j in range(16):
                    if 16 * chunk + j < n_tok:
                        gate[16 * chunk + j] = bool(bits >> j & 1)
                continue
            if step[0] == "reset":
                ctx.set(dut.gate_reset, 1)
                await lane_step(ctx, dut, acc)
                ctx.set(dut.gate_reset, 0)
                gate[:] = True
                continue
            _, w, f = step
            live = (x[f] != 0) & gate[tokens]
            want[live] += w * x[f][live]
            want_cycles.append(max(1, int(live.sum())))
            ctx.set(dut.feature, f)
            assert ctx.get(dut.nonzero) == live.sum()
            ctx.set(dut.weight, w)
            ctx.set(dut.zero_weight, 0)
            got_cycles.append(await lane_walk(ctx, dut, acc))
        for _ in range(3):
            await lane_step(ctx, dut, acc)

    simulate(dut, bench)
    assert got_cycles == want_cycles and len(want_cycles) > 10
    assert list(acc) == list(want)


@pytest.mark.parametrize("fmt", ["int16", "bf16"])
def test_axpy_lane_takes_the_engines_writes_and_walks_the_ones_slot(fmt):
    """Between AXPYs, the engine's writes (``x_write``: a word and its mask bit, zero words
    too, into any slot) and LOADs: each AXPY walks the mask as they left it (``nonzero``
    counts it) and multiplies the words they wrote; an AXPY with ``ones`` walks every gated
    token of the bank whatever ``feature``'s mask holds and multiplies the format's one."""
    from wse.fabric import numerics
    from wse.rtl.numfmt import number_format

    params = CoreParams(n_feat=3, n_tok=8, n_out=1, lanes=2, fmt=number_format(fmt))
    tpb, f = params.tpb, params.fmt
    dut = AxpyLane(params, 1)
    rng = np.random.default_rng(11)

    def operand():
        if f.is_float:
            return int(rng.choice([0, 0x8000, *numerics.encode(f, rng.normal(0, 2, 4))[0]]))
        return int(rng.choice([0, 0, *rng.integers(-300, 300, 4)]))

    x = np.zeros((3, tpb), dtype=np.int64)
    acc = np.zeros(tpb, dtype=np.int64)
    want = np.zeros(tpb, dtype=np.int64)
    steps = [(str(rng.choice(["write", "load", "axpy", "ones"])), int(rng.integers(0, 3)),
              int(rng.integers(0, tpb)), operand()) for _ in range(60)]
    counts = []

    async def bench(ctx):
        for kind, slot, index, value in steps:
            if kind in ("write", "load"):
                if kind == "write":
                    ctx.set(dut.x_write, 1)
                    ctx.set(dut.x_slot, slot)
                    ctx.set(dut.x_index, index)
                    ctx.set(dut.x_value, value)
                else:
                    ctx.set(dut.load, 1)
                    ctx.set(dut.feature, slot)
                    ctx.set(dut.load_index, index)
                    ctx.set(dut.load_value, value)
                    ctx.set(dut.load_zero, bool(numerics.is_zero(f, value)))
                x[slot, index] = value
                await lane_step(ctx, dut, acc)
                ctx.set(dut.x_write, 0)
                ctx.set(dut.load, 0)
                continue
            ones = kind == "ones"
            row = np.full(tpb, numerics.one(f)) if ones else x[slot]
            live = ~numerics.is_zero(f, row)
            w = 0x3F80 if f.is_float else 256                        # one, in either format
            ctx.set(dut.feature, slot)
            ctx.set(dut.ones, ones)
            counts.append((ctx.get(dut.nonzero), int(live.sum())))
            if f.is_float:
                want[:] = [int(numerics.accumulate(f, np.array([a]), numerics.multiply(
                    f, np.array([w]), np.array([v])))[0][0]) if z else a
                    for a, v, z in zip(want, row, live)]
            else:
                want[live] += w * row[live]
            ctx.set(dut.weight, w)
            ctx.set(dut.zero_weight, 0)
            await lane_walk(ctx, dut, acc)
            ctx.set(dut.ones, 0)
        for _ in range(3):
            await lane_step(ctx, dut, acc)

    simulate(dut, bench)
    assert all(got == n for got, n in counts) and len(counts) > 20
    assert list(acc) == list(want)


async def lane_walk(ctx, dut, acc):
    """One AXPY's walk on an :class:`AxpyLane` (its ``feature``, ``weight`` and ``zero_weight``
    set): ``walk`` until the lane says ``done``, ``active`` after the first cycle; returns its
    cycles."""
    ctx.set(dut.walk, 1)
    n = 0
    while True:
        ctx.set(dut.active, n > 0)
        n += 1
        done = ctx.get(dut.done)
        await lane_step(ctx, dut, acc)
        if done:
            break
    ctx.set(dut.walk, 0)
    ctx.set(dut.active, 0)
    return n


async def lane_step(ctx, dut, acc):
    """One clock of an :class:`AxpyLane` whose accumulators ``acc`` the bench holds: the MAC
    reads an accumulator and writes back its sum in the same cycle."""
    if ctx.get(dut.acc.write):
        index = ctx.get(dut.acc.write_index)
        ctx.set(dut.acc.data, int(acc[index]))
        acc[index] = ctx.get(dut.acc.write_data)
    await ctx.tick()


def test_read_engine_sends_words_of_x_y_and_counters():
    """Words of X, Y and the counters; the bench holds the counters as the core does (the
    READ's own busy cycles, errors and words out count, two others move on every cycle) and
    answers the engine's counter reads: ``busy_cycles``, ``errors`` and ``wavelets_out`` come
    back as they were when the READ started (the engine takes its own increments off with
    ``less``), the others as they are. The fifth READ starts on three bad words."""
    params = CoreParams(n_feat=2, n_tok=4, n_out=2, lanes=2)
    dut = ReadEngine(params)
    x = np.array([[1, -2, 3, 0], [5, 6, -7, 8]])
    y = np.array([[-9, 10, 11, 12], [13, 14, 15, -16]])
    live = [100 + 1000 * k for k in range(len(COUNTERS) - 1)]
    k_of = {name: k for k, name in enumerate(COUNTERS)}
    reads = [(0, 8), (Y_BASE + 2, 4), (COUNTER_BASE, len(COUNTERS)), (0x7FFF, 2),
             (COUNTER_BASE - 3, 12), (0, 0)]
    sent, costs, want = [], [], []

    def signed32(v):
        return int(v) & 0xFFFFFFFF

    async def bench(ctx):
        ctx.set(dut.out_color, 14)
        ctx.set(dut.overflow, 1)
        for address, length in reads:
            ctx.set(dut.arg, ReadArg.const({"addr": address, "len": length}))
            ctx.set(dut.start, 1)
            start = list(live)
            await ctx.tick()
            ctx.set(dut.start, 0)
            live[k_of["busy_cycles"]] += 1             # the READ's own cycle, at the dispatcher
            busy = stall = errors = 0
            word = address
            for cycle in range(100):
                if not ctx.get(dut.active):
                    break
                ctx.set(dut.out.ready, cycle % 3 == 2)
                if ctx.get(dut.count.read):             # a word's read cycle
                    k, less = ctx.get(dut.count.index), ctx.get(dut.count.less)
                    ctx.set(dut.count.value, (live[k] - less) & 0xFFFFFFFF)
                    a = word & 0xFFFF
                    if a < 8:
                        want.append(signed32(x.flat[(a // 4) * 4 + a % 4]))
                    elif Y_BASE <= a < Y_BASE + 8:
                        want.append(signed32(y.flat[a - Y_BASE]))
                    elif COUNTER_BASE <= a < COUNTER_BASE + len(COUNTERS) - 1:
                        k = a - COUNTER_BASE
                        want.append(start[k] if COUNTERS[k] in SNAPSHOT else live[k])
                    else:
                        want.append(1 if a == COUNTER_BASE + k_of["overflow"] else 0)
                    word += 1
                x_read, x_addr = ctx.get(dut.x_read), ctx.get(dut.x_address)
                y_read, y_addr = ctx.get(dut.y_read), ctx.get(dut.y_address)
                busy += ctx.get(dut.busy)
                stall += ctx.get(dut.stall)
                errors += ctx.get(dut.error)
                out = ctx.get(dut.out.valid) and ctx.get(dut.out.ready)
                if out:
                    word_sent = WAVELET.unpack(ctx.get(dut.out.payload.as_value()))
                    assert int(word_sent["color"]) == 14 and int(word_sent["ctrl"]) == 0
                    sent.append(int(word_sent["data"]))
                for name, step in (("busy_cycles", ctx.get(dut.busy)),
                                   ("stall_cycles", ctx.get(dut.stall)),
                                   ("errors", ctx.get(dut.error)), ("wavelets_out", out),
                                   ("wavelets_in", 1), ("macs_issued", 3)):
                    live[k_of[name]] += int(step)
                await ctx.tick()
                for b in range(2):
                    if x_read >> b & 1:           # bank b's word at index x_addr
                        f, i = divmod(x_addr, 2)
                        ctx.set(dut.x_data[b], int(x[f, 2 * i + b]))
                if y_read:
                    ctx.set(dut.y_data, int(y.flat[y_addr]))
            costs.append((busy, errors))

    simulate(dut, bench)
    assert sent == want
    assert want[:12] == [signed32(v) for v in x.flat] + [signed32(v) for v in y.flat[2:6]]
    assert want[-12:-9] == [0, 0, 0] and len(want) == sum(n for _, n in reads)
    bad = [1 if a == 0x7FFF else 3 if a == COUNTER_BASE - 3 else 0 for a, _ in reads]
    assert costs == [(2 * n, e) for (_, n), e in zip(reads, bad)]


def test_acc_buffers_hand_retired_sums_to_the_engine_zeroed_after():
    """MAC ports add into the active buffer; ``retire`` queues it; the engine side reads back
    each token's sum; a buffer starts from zero when it comes round again (nothing clears it:
    its words read 0 until written)."""
    params = CoreParams(n_feat=1, n_tok=4, n_out=4, lanes=2, rows=2)
    dut = AccBuffers(params, 2)
    rng = np.random.default_rng(5)
    drained, jobs, flags = [], [], []
    want = []

    async def add(ctx, bank, index, value):
        mac = getattr(dut, f"mac{bank}")
        ctx.set(dut.issue, 1)                     # walk cycle: the active buffer is latched
        await ctx.tick()
        ctx.set(dut.issue, 0)
        ctx.set(mac.read, 1)                      # s1: the token one stage away
        await ctx.tick()
        ctx.set(mac.read, 0)                      # s2: read, add, write back
        ctx.set(mac.write, 1)
        ctx.set(mac.write_index, index)
        ctx.set(mac.write_data, ctx.get(mac.data) + value)
        await ctx.tick()
        ctx.set(mac.write, 0)

    async def bench(ctx):
        for o in range(4):
            sums = np.zeros(4, dtype=np.int64)
            for _ in range(6):
                t, v = int(rng.integers(0, 4)), int(rng.integers(-1000, 1000))
                await add(ctx, t % 2, t // 2, v)
                sums[t] += v
            want.append(list(sums))
            ctx.set(dut.retire, 1)
            ctx.set(dut.retire_job, {"slot": o // 2, "owner": o % 2, "raw": o == 3})
            await ctx.tick()
            ctx.set(dut.retire, 0)
            flags.append((ctx.get(dut.pending), ctx.get(dut.full)))
            ctx.set(dut.job.ready, 1)             # the engine takes the job...
            assert ctx.get(dut.job.valid)
            job = ctx.get(dut.job.payload)
            assert job.gate == 0b1111             # the gate the buffer was filled under
            jobs.append((job.cr.slot, job.cr.owner, job.cr.raw))
            await ctx.tick()
            ctx.set(dut.job.ready, 0)
            ctx.set(dut.drain.busy, 1)
            got = await drain_tokens(ctx, dut, 4)     # reads each token, then adds it
            ctx.set(dut.drain.busy, 0)
            drained.append(got)
            flags.append((ctx.get(dut.pending), ctx.get(dut.full)))

    simulate(dut, bench)
    assert drained == want
    assert jobs == [(o // 2, o % 2, int(o == 3)) for o in range(4)]
    assert flags == [(1, 1), (0, 0)] * 4          # two buffers: one retired is all of them


@pytest.mark.parametrize("seed, quiet, gated, acts", [(0, False, False, False),
                                                       (1, False, False, False),
                                                       (2, False, True, False),
                                                       (3, True, False, False),
                                                       (4, True, True, False),
                                                       (5, False, False, True),
                                                       (6, True, True, True),
                                                       (7, False, True, True),
                                                       (8, False, False, True),
                                                       (9, True, False, True)])
def test_psum_engine_adds_neighbours_psums_by_role(seed, quiet, gated, acts):
    """Row 1 of 3: owner 0 sends acc + south psum north, owner 1 writes requantised
    acc + north + south into Y (raw: sends it on ``out``), owner 2 sends acc + north south.
    With ``quiet``, jobs with random ``quiet_n`` / ``quiet_s``: no psum taken from that
    side (as if there were no neighbour there). With ``gated``, each job's gate lets a random
    few of the 4 tokens through (none, now and then): the engine visits those alone. The
    bench changes ``open_tokens`` (the active tokens, the first 0 to 4) between some jobs,
    while the engine is idle and no job is offered, as the core's TOKENS does: a CR, CR_OUT
    or CR_ACT pays it no heed. With ``acts``, a third of the jobs are CR_ACTs (on the owner
    row: the ReLU of the requantised sum into ``X`` and out, in the cycle ``out`` takes it;
    elsewhere a CR's psums), outputs 4 and 10 CR_DELTAs under a gate of their own (tokens 0
    and 2 with tokens 0 to 2 active: token 3 gated but not visited; tokens 1 and 3 with all
    four active), which visit every active token, gated or not, taking its psums, and write
    the requantised sum where the gate is set, 0 where it is clear (negative results kept);
    and the output takes a word less often: a result waits for it, and the adds behind it
    wait."""
    params = CoreParams(n_feat=4, n_tok=4, n_out=4, lanes=2, rows=3, row=1)
    c = params.colors
    dut = PsumEngine(params)
    rng = np.random.default_rng(seed)
    outputs = [(o, ["cr", "raw", "act"][int(rng.integers(0, 3 if acts else 2))])
               for o in range(7 if not acts else 12)]
    if acts:        # outputs 1 and 7 are this row's CR_ACTs, 4 and 10 its CR_DELTAs
        outputs = [(o, "act" if o in (1, 7) else "delta" if o in (4, 10) else kind)
                   for o, kind in outputs]
    flags = {o: (tuple(bool(v) for v in rng.random(2) < 0.4) if quiet else (False, False))
             for o, _ in outputs}
    acc = {o: list(rng.integers(-5000, 5000, 4)) for o, _ in outputs}
    gates = {o: int(rng.integers(0, 16)) | (o == 1) if gated else 0b1111 for o, _ in outputs}
    # the active tokens (their count) each job is taken under: new ones before some jobs
    counts = {o: int(rng.integers(0, 5)) for o, _ in outputs}
    if acts:
        gates.update({4: 0b0101, 10: 0b1010})
        counts.update({4: 3, 10: 4})
        acc[4][0] = -20000                        # a negative result, kept
    events = []
    for k, (o, kind) in enumerate(outputs):
        if k == 0 or counts[o] != counts[outputs[k - 1][0]]:
            events.append(("tokens", counts[o]))
        events.append((o, kind))
    from_n = [int(v) for v in rng.integers(-5000, 5000, 60)]
    from_s = [int(v) for v in rng.integers(-5000, 5000, 60)]
    sent, y, x = [], {}, {}
    waited = [0]                                  # cycles a CR_ACT's result waited for out

    async def bench(ctx):
        held = [0, 0]                             # each bank's read port holds its data
        queue = list(events)
        current = None                            # the output of the last job taken
        n = s = 0
        for _ in range(800):
            # a TOKENS: once the engine is idle (no job, no CR_ACT word waiting for out)
            if queue and queue[0][0] == "tokens" and not ctx.get(dut.acc.busy) \
                    and not ctx.get(dut.x_pending):
                ctx.set(dut.open_tokens, (1 << queue.pop(0)[1]) - 1)
            offer = bool(queue) and queue[0][0] != "tokens"
            ctx.set(dut.job.valid, offer)
            if offer:
                o, kind = queue[0]
                ctx.set(dut.job.payload, {"cr": {"slot": o // 3, "owner": o % 3,
                                                 "raw": kind == "raw",
                                                 "act": kind in ("act", "delta"),
                                                 "delta": kind == "delta",
                                                 "quiet_n": flags[o][0],
                                                 "quiet_s": flags[o][1]},
                                          "gate": gates[o]})
            ctx.set(dut.psum_n.valid, bool(rng.random() < 0.7))
            ctx.set(dut.psum_n.payload, from_n[n] & 0xFFFFFFFF)
            ctx.set(dut.psum_s.valid, bool(rng.random() < 0.7))
            ctx.set(dut.psum_s.payload, from_s[s] & 0xFFFFFFFF)
            ctx.set(dut.out.ready, bool(rng.random() < (0.4 if acts else 0.6)))
            ctx.set(dut.acc.data, held[ctx.get(dut.acc.add_bank)])
            took = offer and ctx.get(dut.job.ready)
            if ctx.get(dut.acc.read):             # token 0 of the job taken now, or current's
                source = queue[0][0] if ctx.get(dut.acc.read_next) else current
                bank, index = ctx.get(dut.acc.read_bank), ctx.get(dut.acc.read_index)
                read = (bank, int(acc[source][index * 2 + bank]))
            else:
                read = None
            taken = ctx.get(dut.out.valid) and ctx.get(dut.out.ready)
            if taken:
                word = WAVELET.unpack(ctx.get(dut.out.payload.as_value()))
                sent.append((int(word["color"]), int(word["data"])))
            if ctx.get(dut.x_pending):
                assert ctx.get(dut.out.valid), "a CR_ACT's result not offered"
                assert int(word_data(ctx)) == ctx.get(dut.x_value) & 0xFFFFFFFF or not taken
                waited[0] += not taken
            assert ctx.get(dut.x_write) == (ctx.get(dut.x_pending) and taken)
            if ctx.get(dut.x_write):
                at = (ctx.get(dut.x_bank), ctx.get(dut.x_slot), ctx.get(dut.x_index))
                x[at] = ctx.get(dut.x_value)
            if ctx.get(dut.y_write):
                y[ctx.get(dut.y_address)] = ctx.get(dut.y_value)
            n += ctx.get(dut.psum_n.valid) and ctx.get(dut.psum_n.ready)
            s += ctx.get(dut.psum_s.valid) and ctx.get(dut.psum_s.ready)
            await ctx.tick()
            if read:
                held[read[0]] = read[1]
            if took:
                current = queue.pop(0)[0]
        assert not queue

    def word_data(ctx):
        return WAVELET.unpack(ctx.get(dut.out.payload.as_value()))["data"]

    simulate(dut, bench)
    want_sent, want_y, want_x, n, s = [], {}, {}, 0, 0
    deltas = []                                   # (gated, value) of each CR_DELTA word
    for o, kind in outputs:
        owner = o % 3
        visits = (1 << counts[o]) - 1 if kind == "delta" else gates[o]
        for t in (t for t in range(4) if visits >> t & 1):
            total = int(acc[o][t])
            if owner >= 1 and not flags[o][0]:
                total += from_n[n]
                n += 1
            if owner <= 1 and not flags[o][1]:
                total += from_s[s]
                s += 1
            if owner == 1 and kind == "cr":
                want_y[(o // 3) * 4 + t] = round(total / 256)
            elif owner == 1 and kind in ("act", "delta"):
                at = (t % 2, o // 3, t // 2)
                if kind == "act":
                    want_x[at] = max(0, round(total / 256))
                else:
                    kept = bool(gates[o] >> t & 1)
                    want_x[at] = round(total / 256) if kept else 0
                    deltas.append((kept, want_x[at]))
                want_sent.append((c.out, want_x[at] & 0xFFFFFFFF))
            else:
                color = c.out if owner == 1 else (c.psum_to_n if owner == 0 else c.psum_to_s)
                want_sent.append((color, total & 0xFFFFFFFF))
    assert sent == want_sent
    assert y == want_y
    assert x == want_x
    assert not quiet or any(any(f) for f in flags.values())
    assert sum(what == "tokens" for what, _ in events) > 2
    if acts:
        assert want_x and waited[0] > 0 and 0 in want_x.values()
        assert len(deltas) == 7 and any(k and v < 0 for k, v in deltas)
        assert [k for k, _ in deltas] == [True, False, True, False, True, False, True]
        print(f"psum engine, CR_ACT results under backpressure: {len(want_x)} written, "
              f"{waited[0]} cycles waiting for out")
