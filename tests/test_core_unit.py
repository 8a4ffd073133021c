"""The RTL core in Amaranth's simulator against the golden model (fabric/pe_model.py)."""

from functools import partial

import numpy as np
import pytest

from wse.fabric import numerics, pe_model
from wse.rtl import isa
from wse.rtl.core_params import COUNTER_BASE, COUNTERS, Y_BASE, CoreParams
from wse.rtl.wavelet import ControlOp, pack

from .core_harness import run_core

#: The counter whose value depends on timing (waits). ``wavelets_in`` is compared too: the
#: harness reads the counters once everything else has been taken.
TIMED = {"stall_cycles"}


def compare(params, commands, psums_n=(), psums_s=(), ready=lambda cycle: True, core_kwargs=None):
    """Run RTL and model on the same wavelets; assert equal outputs and counters."""
    model = pe_model.CoreModel(params)
    c = params.colors
    from_n = pe_model.psums(c.psum_from_n, psums_n)
    from_s = pe_model.psums(c.psum_from_s, psums_s)
    want = model.run(list(commands) + [pe_model.read(params, COUNTER_BASE, len(COUNTERS))],
                     psum_from_n=psums_n, psum_from_s=psums_s)
    got, counters, cycles = run_core(params, commands, from_n, from_s, ready=ready,
                                     **(core_kwargs or {}))
    want_out = want.pop(c.out)
    want_counters = dict(zip(COUNTERS, want_out[-len(COUNTERS):]))
    for color, words in want.items():
        assert got.get(color, []) == words, f"color {color}"
    assert got.get(c.out, []) == want_out[:-len(COUNTERS)]
    for name in COUNTERS:
        if name not in TIMED:
            assert counters[name] == want_counters[name], name
    return counters, cycles


def gemm_commands(params, w, x, *, zeros=True):
    """LOAD ``x`` (features x tokens), stream ``w`` (outputs x features) with CRs, READ ``Y``."""
    cmds = [pe_model.addr(params, 0), *pe_model.load(params, x)]
    for o, row in enumerate(w):
        for f, value in enumerate(row):
            if value or zeros:
                cmds.append(pe_model.weight(params, int(value), f))
        cmds.append(pe_model.cr(params, o))
    cmds.append(pe_model.read(params, Y_BASE, len(w) * params.n_tok))
    return cmds


@pytest.mark.parametrize("lanes", [1, 2, 4])
def test_dense_and_sparse_gemm_match_the_model(lanes):
    params = CoreParams(n_feat=8, n_tok=8, n_out=4, lanes=lanes)
    rng = np.random.default_rng(lanes)
    x = rng.integers(-300, 300, (8, 8))
    x[rng.random((8, 8)) < 0.5] = 0
    w = rng.integers(-300, 300, (4, 8))
    w[rng.random((4, 8)) < 0.6] = 0
    counters, cycles = compare(params, gemm_commands(params, w, x))
    print(f"lanes {lanes}: busy {counters['busy_cycles']}, issued {counters['macs_issued']}, "
          f"skipped weight {counters['macs_skipped_weight']} act {counters['macs_skipped_act']},"
          f" {cycles} cycles in all")


def test_saturation_and_rounding():
    params = CoreParams(n_feat=2, n_tok=4, n_out=2)
    x = np.array([[32767, -32768, 1, 128], [32767, 32767, -1, 384]])
    w = np.array([[32767, 32767], [-32768, 1]])
    compare(params, gemm_commands(params, w, x))


def test_requantisation_rounds_half_to_even():
    """Sums exactly halfway between two results: 0.5, 1.5, 2.5, -0.5, -1.5, -2.5 (frac 8)."""
    params = CoreParams(n_feat=1, n_tok=8, n_out=1)
    x = np.array([[1, 3, 5, -1, -3, -5, 2, 7]])
    w = np.array([[128]])
    compare(params, gemm_commands(params, w, x))
    model = pe_model.CoreModel(params)
    model.run(gemm_commands(params, w, x))
    assert list(model.y[0]) == [0, 2, 2, 0, -2, -2, 1, 4]


def test_bad_inputs_are_counted_and_dropped():
    params = CoreParams(n_feat=2, n_tok=4, n_out=1)
    c = params.colors
    cmds = [pe_model.addr(params, 6), *pe_model.load(params, [1, 2, 3]),   # last one outside X
            pe_model.weight(params, 5, 7),                                  # slot outside X
            int(pack(isa.control_data(8), c.weight, 1)),                    # unknown opcode
            int(pack(1, 30)),                                               # foreign color
            pe_model.cr(params, 5),                                         # Y slot 5 > n_out
            pe_model.read(params, 0x7FFF, 2)]      # 0x7FFF outside the map, 0x8000 is Y[0]
    counters, _ = compare(params, cmds)
    assert counters["errors"] == 6


@pytest.mark.parametrize("row", [0, 1, 2])
def test_partial_sums_of_a_middle_row(row):
    params = CoreParams(n_feat=4, n_tok=4, n_out=2, rows=3, row=row)
    rng = np.random.default_rng(row)
    x = rng.integers(-200, 200, (4, 4))
    w = rng.integers(-200, 200, (3, 4))
    cmds = gemm_commands(params, w, x, zeros=False)
    # Outputs 0, 1, 2 are owned by rows 0, 1, 2: the psums this row receives for each.
    n_from_n = sum(4 for o in range(3) if 0 < row <= o % 3)
    n_from_s = sum(4 for o in range(3) if o % 3 <= row < 2)
    psums = (list(rng.integers(-5000, 5000, n_from_n)), list(rng.integers(-5000, 5000, n_from_s)))
    compare(params, cmds, *psums)
    # Psums leaving under backpressure: the engine's add stage waits with a token in hand.
    compare(params, cmds, *psums, ready=lambda cycle: cycle % 3 == 0)


@pytest.mark.parametrize("n_tok, lanes", [(1, 1), (4, 4), (8, 8)])
def test_edge_shapes_with_output_backpressure(n_tok, lanes):
    """One token; as many lanes as tokens (one token per bank); replies under backpressure."""
    params = CoreParams(n_feat=3, n_tok=n_tok, n_out=3, lanes=lanes)
    rng = np.random.default_rng(n_tok + lanes)
    x = rng.integers(-300, 300, (3, n_tok))
    x[rng.random((3, n_tok)) < 0.4] = 0
    w = rng.integers(-300, 300, (3, 3))
    compare(params, gemm_commands(params, w, x), ready=lambda cycle: cycle % 3 == 0)


def test_back_to_back_carriage_returns_and_reads_between():
    """CRs with no weights between them, READs of Y before any CR and between CRs."""
    params = CoreParams(n_feat=2, n_tok=4, n_out=4, lanes=2)
    cmds = [pe_model.read(params, Y_BASE, 4), pe_model.addr(params, 0),
            *pe_model.load(params, [[1, 2, 0, 4], [0, 0, 7, 8]]),
            pe_model.weight(params, 300, 0), pe_model.cr(params, 0), pe_model.cr(params, 1),
            pe_model.read(params, Y_BASE, 8), pe_model.weight(params, -300, 1),
            pe_model.cr(params, 2), pe_model.cr(params, 3), pe_model.read(params, Y_BASE, 16)]
    compare(params, cmds, ready=lambda cycle: cycle % 2 == 0)


def test_params_round_trip_through_json_form():
    from wse.rtl.core_params import CoreColors
    from wse.rtl.numfmt import FixedPoint
    params = CoreParams(n_tok=32, lanes=4, rows=3, row=2, colors=CoreColors(cmd=20),
                        fmt=FixedPoint(width=8, frac_bits=3, acc_width=16))
    assert CoreParams.from_dict({**params.to_dict(), "seed": 1}) == params


@pytest.mark.parametrize("row", [0, 1, 2])
def test_raw_carriage_returns_send_totals_out(row):
    """CR_OUT: the owner sends its 32-bit totals on ``out``; the others pass psums as for a CR.
    Result slot 1 (outputs 3, 4) is in Y, slot >= 2 would be no error for a raw CR (Y is not
    written); overflowing sums stay raw."""
    params = CoreParams(n_feat=4, n_tok=4, n_out=2, rows=3, row=row)
    rng = np.random.default_rng(10 + row)
    x = rng.integers(-30000, 30000, (4, 4))
    w = rng.integers(-30000, 30000, (5, 4))
    cmds = [pe_model.addr(params, 0), *pe_model.load(params, x)]
    for o, weights in enumerate(w):
        cmds += [pe_model.weight(params, int(v), f) for f, v in enumerate(weights)]
        cmds.append(pe_model.cr(params, o, raw=o != 3))      # output 3 (owner 0) requantised
    n_from_n = sum(4 for o in range(5) if 0 < row <= o % 3)
    n_from_s = sum(4 for o in range(5) if o % 3 <= row < 2)
    psums = (list(rng.integers(-2**31, 2**31, n_from_n)),
             list(rng.integers(-2**31, 2**31, n_from_s)))
    counters, _ = compare(params, cmds + [pe_model.read(params, Y_BASE, 4)], *psums,
                          ready=lambda cycle: cycle % 2 == 0)
    assert counters["errors"] == 0


def test_core_is_idle_only_when_everything_has_taken_effect():
    from amaranth.sim import Simulator

    from wse.rtl.core import Core

    params = CoreParams(n_feat=2, n_tok=4, n_out=1, lanes=1)
    dut = Core(params)
    cmds = [pe_model.addr(params, 0), *pe_model.load(params, [[1, 2, 3, 4], [0, 0, 0, 0]]),
            pe_model.weight(params, 256, 0), pe_model.cr(params, 0)]
    trace = []

    async def bench(ctx):
        ctx.set(dut.o.ready, 1)
        trace.append(ctx.get(dut.idle))
        for word in cmds:
            ctx.set(dut.i.payload.as_value(), word)
            ctx.set(dut.i.valid, 1)
            while not ctx.get(dut.i.ready):
                await ctx.tick()
                trace.append(ctx.get(dut.idle))
            await ctx.tick()
            trace.append(ctx.get(dut.idle))
        ctx.set(dut.i.valid, 0)
        for _ in range(30):
            await ctx.tick()
            trace.append(ctx.get(dut.idle))

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert trace[0] == 1                       # after reset
    assert 0 in trace[1:]                      # busy while commands run
    first_idle = trace.index(1, 1)
    assert all(trace[first_idle:])             # then idle for good, once the engine is done
    # the AXPY (4 cycles) and the engine (n_tok + 3 = 7 cycles) ran before it went idle
    assert first_idle >= len(cmds) + 4


@pytest.mark.parametrize("acc_buffers", [3, 4])
def test_more_accumulator_buffers_change_timing_not_results(acc_buffers):
    """With several buffers waiting for the engine (psums arrive late, output backpressure),
    every CR still reduces its own buffer, in order."""
    params = CoreParams(n_feat=4, n_tok=4, n_out=4, rows=3, row=1, lanes=2)
    rng = np.random.default_rng(acc_buffers)
    x = rng.integers(-200, 200, (4, 4))
    x[rng.random((4, 4)) < 0.3] = 0
    w = rng.integers(-200, 200, (9, 4))
    w[rng.random((9, 4)) < 0.5] = 0
    cmds = gemm_commands(params, w, x, zeros=False)
    n_from_n = sum(4 for o in range(9) if 0 < 1 <= o % 3)
    n_from_s = sum(4 for o in range(9) if o % 3 <= 1 < 2)
    psums = (list(rng.integers(-5000, 5000, n_from_n)), list(rng.integers(-5000, 5000, n_from_s)))
    compare(params, cmds, *psums, ready=lambda cycle: cycle % 4 == 0,
            core_kwargs={"acc_buffers": acc_buffers})


@pytest.mark.parametrize("seed", range(12))
def test_random_streams_with_busy_engine_and_short_outputs(seed):
    """Many outputs of zero to two weights each, so carriage returns ride on AXPYs while the
    engine is finishing the output before (its next read overlaps its last add); random output
    pacing; the command FIFO with one copy of its held parts or two, by seed. Catches an
    engine that reads a buffer the MAC pipeline still writes."""
    rng = np.random.default_rng(100 + seed)
    rows, row = 3, int(rng.integers(0, 3))
    n_tok, lanes = [(4, 1), (4, 2), (2, 1)][seed % 3]
    params = CoreParams(n_feat=3, n_tok=n_tok, n_out=8, rows=rows, row=row, lanes=lanes)
    x = rng.integers(-300, 300, (3, n_tok))
    x[rng.random(x.shape) < 0.3] = 0
    cmds = [pe_model.addr(params, 0), *pe_model.load(params, x)]
    outputs = 20
    for o in range(outputs):
        for f in rng.choice(3, int(rng.integers(0, 3)), replace=False):
            cmds.append(pe_model.weight(params, int(rng.integers(-300, 300)), int(f)))
        cmds.append(pe_model.cr(params, o, raw=bool(rng.integers(0, 2))))
    n_from_n = sum(n_tok for o in range(outputs) if 0 < row <= o % rows)
    n_from_s = sum(n_tok for o in range(outputs) if o % rows <= row < rows - 1)
    psums = (list(rng.integers(-5000, 5000, n_from_n)), list(rng.integers(-5000, 5000, n_from_s)))
    pace = rng.random(4000) < 0.7
    compare(params, cmds + [pe_model.read(params, Y_BASE, 8 * n_tok)], *psums,
            ready=lambda cycle: bool(pace[cycle % len(pace)]),
            core_kwargs={"acc_buffers": int(rng.integers(2, 5)), "held_copies": 1 + seed % 2})


def test_a_mask_gates_one_output_and_every_carriage_return_opens_the_gate():
    """MASKs of two chunks, then AXPYs whose carriage return rides on the last one (the next
    AXPY sees every token again), a CR on its own cycle behind a MASK, a dropped CR (the gate
    stays), a CR_OUT; another column's MASKs on both colors are discarded, a chunk past the
    core's tokens is an error."""
    params = CoreParams(n_feat=2, n_tok=32, n_out=2, lanes=2, col=1, cols=2)
    rng = np.random.default_rng(5)
    x = rng.integers(-300, 300, (2, 32))
    x[rng.random(x.shape) < 0.2] = 0
    c = params.colors.cmd
    mask, weight, cr = (partial(f, params) for f in (pe_model.mask, pe_model.weight,
                                                     pe_model.cr))
    cmds = [pe_model.select(params), pe_model.addr(params, 0), *pe_model.load(params, x),
            mask(0, 0x0F0F), mask(1, 0xA5A5), mask(0, 0, col=0), weight(7, 0), weight(-5, 1),
            cr(0),                                                # rides on the AXPY: gate open
            weight(3, 1), mask(1, 0x0001), mask(2, 0), mask(0, 0xFFFF, col=0, color=c),
            weight(2, 0), mask(0, 0x8000), cr(1),                 # a CR on its own cycle
            weight(1, 0), mask(1, 0x00F0), cr(2), weight(4, 1),   # dropped: the gate stays
            cr(3, raw=True), weight(1, 1), cr(1, raw=True),
            pe_model.read(params, Y_BASE, 2 * 32)]
    counters, _ = compare(params, cmds)
    assert counters["errors"] == 2


@pytest.mark.parametrize("seed", range(12))
def test_random_masked_streams_match_the_model(seed):
    """Random outputs of MASKs (this column's and others', on ``weight`` and ``cmd``, chunks
    past the core's tokens), weights (zero ones too), READs, SELECTs of other columns and
    carriage returns (CR, CR_OUT, dropped ones) with 1, 2 and 4 lanes and 2 or 4 chunks;
    psums from both sides; random output pacing; straps in half the runs and, crossed with
    them, the command FIFO's held parts in one copy or two."""
    rng = np.random.default_rng(300 + seed)
    lanes, n_tok = [(1, 32), (2, 64), (4, 32)][seed % 3]
    rows, cols = 3, 3
    row, col = int(rng.integers(0, rows)), int(rng.integers(0, cols))
    params = CoreParams(n_feat=3, n_tok=n_tok, n_out=2, lanes=lanes, rows=rows, row=row,
                        col=col, cols=cols)
    chunks = n_tok // 16
    c = params.colors
    x = rng.integers(-300, 300, (3, n_tok))
    x[rng.random(x.shape) < 0.3] = 0
    cmds = [pe_model.select(params), pe_model.addr(params, 0), *pe_model.load(params, x)]

    def a_mask():
        color = c.cmd if rng.random() < 0.3 else c.weight
        other = int(rng.choice([k for k in range(cols) if k != col] + [col + 4, 63]))
        which = int(rng.choice([col, col, other]))
        chunk = int(rng.integers(0, chunks + 1)) if rng.random() < 0.9 else 63
        return pe_model.mask(params, chunk, int(rng.integers(0, 1 << 16)), col=which,
                             color=color)

    for _ in range(10):
        for _ in range(int(rng.integers(0, 4))):
            cmds.append(a_mask())
        for f in rng.choice(3, int(rng.integers(0, 4)), replace=False):
            value = int(rng.integers(-300, 300)) if rng.random() < 0.8 else 0
            cmds.append(pe_model.weight(params, value, int(f)))
        roll = rng.random()
        if roll < 0.15:                   # a MASK between the weights and the CR
            cmds.append(a_mask())
        elif roll < 0.25:                 # another column selected: its cmd MASK discarded
            cmds += [pe_model.select(params, (col + 1) % cols),
                     pe_model.mask(params, 0, 0, color=c.cmd), pe_model.select(params)]
        elif roll < 0.3:
            cmds.append(pe_model.read(params, 0, 4))
        raw = bool(rng.integers(0, 2))
        o = int(rng.integers(0, params.n_out * rows))
        if rng.random() < 0.1:            # this row's, outside Y: dropped unless raw
            o = params.n_out * rows + row
        cmds.append(pe_model.cr(params, o, raw=raw))
    psums = _psums_taken(params, cmds, rng)
    pace = rng.random(4000) < 0.7
    # the gates matter: without the MASKs the same stream issues more MACs
    issued = []
    for stream in (cmds, [w for w in cmds if not _is_mask(w)]):
        model = pe_model.CoreModel(params)
        model.run(stream, *_psums_taken(params, stream, rng))
        issued.append(model.counters["macs_issued"])
    assert issued[0] < issued[1]
    compare(params, cmds + [pe_model.read(params, Y_BASE, params.n_out * n_tok)], *psums,
            ready=lambda cycle: bool(pace[cycle % len(pace)]),
            core_kwargs={"acc_buffers": int(rng.integers(2, 5)), "straps": seed % 2 == 1,
                         "held_copies": 1 + seed // 2 % 2})


def _is_mask(word):
    fields = isa.WAVELET.unpack(word)
    op = isa.CONTROL.unpack(int(fields["data"]))["op"]
    return bool(fields["ctrl"]) and op == ControlOp.MASK.value


# Carriage return flags (``isa.CrArg``: quiet_n, quiet_s, skip) ----------------------------------

def _psums_taken(params, cmds, rng):
    """Random psums from the north and the south, as many as the carriage returns of ``cmds``
    take: a psum for every token each one's gate lets through (the model counts them)."""
    plenty = 64 * params.n_tok * len(cmds)
    model = pe_model.CoreModel(params)
    model.run(cmds, [0] * plenty, [0] * plenty)
    left = model.pending_psums
    c = params.colors
    return tuple(list(rng.integers(-5000, 5000, plenty - left[color]))
                 for color in (c.psum_from_n, c.psum_from_s))


def _psums_needed(params, crs):
    """Psums a core takes from the north and the south for ``crs``, ``(o, raw, quiet_n,
    quiet_s, skip)`` each: none for a dropped or a skipped one, none from a quiet side."""
    rows, row, n_tok = params.rows, params.row, params.n_tok
    n = s = 0
    for o, raw, quiet_n, quiet_s, skip in crs:
        owner = o % rows
        if skip or (owner == row and o // rows >= params.n_out and not raw):
            continue
        n += n_tok * (0 < row <= owner and not quiet_n)
        s += n_tok * (owner <= row < rows - 1 and not quiet_s)
    return n, s


@pytest.mark.parametrize("seed", range(12))
def test_random_streams_with_flagged_carriage_returns(seed):
    """Outputs of zero to two weights (and a MASK now and then), closed by CRs and CR_OUTs
    with random ``quiet_n`` / ``quiet_s``, ``skip`` where the row had no AXPY since the last
    carriage return (as the host sends it), and some dropped ones (this row's, outside ``Y``,
    flags or not); so flagged CRs ride on AXPYs, wait for buffers or skip past a busy engine.
    Psums from both sides, random output pacing, 2 to 4 buffers, straps and held copies by
    seed. A skipped CR_OUT is never this row's here: the harness counts the totals a stream
    makes from its commands alone."""
    rng = np.random.default_rng(700 + seed)
    rows, row = 3, int(rng.integers(0, 3))
    n_tok, lanes = [(4, 1), (4, 2), (2, 1), (16, 2)][seed % 4]
    params = CoreParams(n_feat=3, n_tok=n_tok, n_out=4, rows=rows, row=row, lanes=lanes)
    x = rng.integers(-300, 300, (3, n_tok))
    x[rng.random(x.shape) < 0.3] = 0
    cmds = [pe_model.addr(params, 0), *pe_model.load(params, x)]
    crs, axpys = [], 0
    for _ in range(24):
        for f in rng.choice(3, int(rng.integers(0, 3)), replace=False):
            cmds.append(pe_model.weight(params, int(rng.integers(-300, 300)), int(f)))
            axpys += 1
        if rng.random() < 0.1:
            cmds.append(pe_model.mask(params, 0, int(rng.integers(0, 1 << 16))))
        o = int(rng.integers(0, params.n_out * rows))
        if rng.random() < 0.08:           # this row's, outside Y: dropped unless raw
            o = params.n_out * rows + row
        raw = bool(rng.integers(0, 2))
        skip = axpys == 0 and rng.random() < 0.6 and not (raw and o % rows == row)
        quiet_n, quiet_s = (bool(v) for v in rng.random(2) < 0.3)
        cmds.append(pe_model.cr(params, o, raw=raw, quiet_n=quiet_n, quiet_s=quiet_s,
                                skip=skip))
        crs.append((o, raw, quiet_n, quiet_s, skip))
        axpys = 0
    psums = _psums_taken(params, cmds, rng)
    assert [len(side) for side in psums] <= list(_psums_needed(params, crs))
    assert any(c[4] for c in crs) and any(c[2] or c[3] for c in crs if not c[4])
    pace = rng.random(4000) < 0.7
    compare(params, cmds + [pe_model.read(params, Y_BASE, params.n_out * n_tok)], *psums,
            ready=lambda cycle: bool(pace[cycle % len(pace)]),
            core_kwargs={"acc_buffers": int(rng.integers(2, 5)), "straps": seed % 2 == 1,
                         "held_copies": 1 + seed // 2 % 2})


@pytest.mark.parametrize("acc_buffers", [2, 3])
def test_a_skip_after_an_axpy_carries_its_sums_into_the_next_output(acc_buffers):
    """A CR with ``skip`` right behind AXPYs (riding on the last one) and on a cycle of its
    own: no buffer is handed over, so the sums stay in the active buffer and the next CR
    hands them over with the next output's: the RTL and the golden model alike. The skip's
    gate reset holds whether it rides or not."""
    params = CoreParams(n_feat=2, n_tok=8, n_out=4, lanes=2)
    x = np.array([[1, 2, 0, 4, 5, 0, 7, 8], [0, 3, 3, 0, -2, 1, 0, 9]]) * 16
    cr = partial(pe_model.cr, params)
    w = partial(pe_model.weight, params)
    cmds = [pe_model.addr(params, 0), *pe_model.load(params, x),
            w(256, 0), cr(0, skip=True),                  # rides on the AXPY: sums stay
            w(512, 1), cr(1),                             # Y[1] = x0 + 2 x1
            w(256, 1), pe_model.mask(params, 0, 0x00FF), cr(2, skip=True),   # own cycle
            w(256, 0), cr(3),                             # Y[3] = x1 + x0 (gate open again)
            cr(0, skip=True), cr(2, skip=True, quiet_n=True),   # back to back, no AXPY
            pe_model.read(params, Y_BASE, 4 * 8)]
    compare(params, cmds, core_kwargs={"acc_buffers": acc_buffers})
    compare(params, cmds, ready=lambda cycle: cycle % 5 == 0,
            core_kwargs={"acc_buffers": acc_buffers})
    model = pe_model.CoreModel(params)
    model.run(cmds)
    assert list(model.y[1]) == list(x[0] + 2 * x[1])
    assert list(model.y[3]) == list(x[0] + x[1])
    assert not model.y[[0, 2]].any()


def test_a_skip_on_the_owner_row_writes_no_y():
    """The owner row: a CR writes ``Y[slot]``; a later CR of that output with ``skip`` (no
    AXPY since) leaves it, where one without would write the empty sum (0) over it; on a
    row with neighbours, a skip takes no psums either."""
    for rows, row in ((1, 0), (3, 1)):
        params = CoreParams(n_feat=1, n_tok=4, n_out=2, rows=rows, row=row, lanes=2)
        o = rows + row                                   # slot 1, this row's
        cmds = [pe_model.addr(params, 0), *pe_model.load(params, [[300, -20, 0, 7]]),
                pe_model.weight(params, 512, 0), pe_model.cr(params, o),
                pe_model.cr(params, o, skip=True), pe_model.read(params, Y_BASE, 8)]
        psums = ([5, 6, 7, 8], [1, 2, 3, 4]) if rows == 3 else ()
        compare(params, cmds, *psums)
        model = pe_model.CoreModel(params)
        model.run(cmds, *psums)
        total = 512 * np.array([300, -20, 0, 7]) + (np.array([6, 8, 10, 12]) if rows == 3 else 0)
        assert list(model.y[1]) == list(np.round(total / 256).astype(int))
        assert model.y[1].any()
        unskipped = pe_model.CoreModel(params)
        unskipped.run([c for c in cmds[:-2]] + [pe_model.cr(params, o), cmds[-1]],
                      *(p + p for p in psums))
        assert not unskipped.y[1].any()


def test_a_skip_never_waits_for_a_buffer():
    """Every buffer but the active one waits for the engine (its output is held up): a CR
    would stall there, but CRs with ``skip`` and AXPYs behind them go straight through (the
    ramp keeps taking words well past the command FIFO's depth); a CR without ``skip`` in the
    same place holds the ramp up. Then the output is released and the results are the golden
    model's."""
    from amaranth.sim import Simulator

    from wse.rtl.core import Core

    params = CoreParams(n_feat=1, n_tok=4, n_out=2, lanes=1)
    x = [[1, 2, 3, 4]]
    head = [pe_model.addr(params, 0), *pe_model.load(params, x),
            pe_model.weight(params, 256, 0), pe_model.cr(params, 0, raw=True)]   # engine stuck

    def run(tail, hold):
        dut = Core(params, acc_buffers=2, cmd_depth=4)
        words, sent, took = head + tail, [], []

        async def bench(ctx):
            for cycle in range(400):
                ctx.set(dut.o.ready, cycle >= hold)
                offer = len(took) < len(words)
                ctx.set(dut.i.valid, offer)
                if offer:
                    ctx.set(dut.i.payload.as_value(), words[len(took)])
                if ctx.get(dut.o.valid) and ctx.get(dut.o.ready):
                    sent.append(ctx.get(dut.o.payload.data))
                taken = offer and ctx.get(dut.i.ready)
                await ctx.tick()
                if taken:
                    took.append(cycle)

        sim = Simulator(dut)
        sim.add_clock(1e-8)
        sim.add_testbench(bench)
        sim.run()
        return took, sent

    skips = [pe_model.cr(params, o % 2, skip=True) for o in range(12)]
    tail = [*skips[:6], pe_model.weight(params, 256, 0), *skips[6:],
            pe_model.cr(params, 1, raw=True), pe_model.read(params, Y_BASE, 4)]
    took, sent = run(tail, hold=200)
    assert len(took) == len(head) + len(tail)
    assert took[len(head) + 13] < 100                      # every skip and the AXPY: no wait
    model = pe_model.CoreModel(params)
    want = model.run(head + tail)[params.colors.out]
    assert sent == [w & 0xFFFFFFFF for w in want]
    assert want[4:8] == [256, 512, 768, 1024]               # the AXPY's sums, carried past
    # the same place without skip: the CR waits, the FIFO fills, the ramp is held up
    plain = [pe_model.cr(params, o % 2) for o in range(12)]
    took, _ = run(plain, hold=200)
    assert took[len(head) + 11] >= 200


# Active tokens (TOKENS) and the gated partial-sum engine ----------------------------------------

@pytest.mark.parametrize("seed", range(6))
def test_random_streams_with_active_tokens_and_gated_outputs(seed):
    """TOKENS now and then (a bad count too), loads and READs of ``X`` and ``Y`` that step over
    the inactive tokens, MASKs that gate outputs down to a few tokens or none, CRs and CR_OUTs
    whose engines visit only the gated tokens (psums taken, sums sent and ``Y`` written for
    those alone), some of them back to back behind a busy engine; random output pacing,
    straps and buffers by seed."""
    rng = np.random.default_rng(900 + seed)
    rows, row = 3, int(rng.integers(0, 3))
    n_tok, lanes = [(16, 1), (32, 2), (8, 4), (16, 2), (4, 1), (32, 1)][seed]
    params = CoreParams(n_feat=3, n_tok=n_tok, n_out=4, rows=rows, row=row, lanes=lanes)
    chunks = -(-n_tok // 16)
    cmds = []
    active = n_tok
    for _ in range(16):
        if rng.random() < 0.4:
            count = int(rng.integers(0, n_tok + 1)) if rng.random() < 0.9 else n_tok + 1
            cmds.append(pe_model.tokens(params, count))
            active = count if count <= n_tok else active
        if rng.random() < 0.3:            # reload X: as many words as the active tokens hold
            x = rng.integers(-300, 300, 3 * max(active, 1))
            x[rng.random(x.shape) < 0.3] = 0
            cmds += [pe_model.addr(params, int(rng.integers(0, 2)) * n_tok),
                     *pe_model.load(params, x)]
        if rng.random() < 0.5:
            bits = int(rng.integers(0, 1 << 16)) & int(rng.choice([0xFFFF, 0x0101, 0]))
            cmds.append(pe_model.mask(params, int(rng.integers(0, chunks)), bits))
        for f in rng.choice(3, int(rng.integers(0, 3)), replace=False):
            cmds.append(pe_model.weight(params, int(rng.integers(-300, 300)), int(f)))
        o = int(rng.integers(0, params.n_out * rows))
        cmds.append(pe_model.cr(params, o, raw=bool(rng.integers(0, 2))))
        if rng.random() < 0.15:
            start = int(rng.choice([0, Y_BASE])) + int(rng.integers(0, 2 * n_tok))
            cmds.append(pe_model.read(params, start, int(rng.integers(1, 2 * n_tok))))
    psums = _psums_taken(params, cmds, rng)
    pace = rng.random(4000) < 0.7
    compare(params, cmds + [pe_model.read(params, Y_BASE, params.n_out * n_tok)], *psums,
            ready=lambda cycle: bool(pace[cycle % len(pace)]),
            core_kwargs={"acc_buffers": int(rng.integers(2, 5)), "straps": seed % 2 == 1})


def test_an_engine_visits_only_the_gated_tokens_and_an_empty_gate_costs_a_cycle():
    """Outputs of 16 tokens gated down to 3, 1 and 0 tokens, queued behind each other: the
    engine's work follows the gates (the cycles drop with them), and the sums match."""
    params = CoreParams(n_feat=1, n_tok=16, n_out=4)
    load = [pe_model.addr(params, 0), *pe_model.load(params, range(1, 17))]

    def cycles(bits):
        cmds = list(load)
        for o in range(4):
            if bits is not None:
                cmds.append(pe_model.mask(params, 0, bits))
            cmds += [pe_model.weight(params, 256, 0), pe_model.cr(params, o, raw=True)]
        return compare(params, cmds)[1]

    full, three, one, none = (cycles(b) for b in (None, 0b10101, 0b1000, 0))
    assert full > three > one > none
    print(f"engine: 4 outputs of 16 tokens gated to 16, 3, 1, 0: {full}, {three}, {one}, "
          f"{none} cycles")


# Activations (CR_ACT), deltas (CR_DELTA) and the ones slot ---------------------------------------

def _operands(params, rng, shape, zeros=0.3):
    """Random operands of ``params.fmt``, about ``zeros`` of them zero (in bf16 a few ``-0``,
    0x8000, among them: a zero too)."""
    if params.fmt.is_float:
        values = numerics.encode(params.fmt, rng.normal(0, 1.5, shape))[0]
        values[rng.random(shape) < zeros] = 0
        values[rng.random(shape) < 0.05] = 0x8000
    else:
        values = rng.integers(-300, 300, shape)
        values[rng.random(shape) < zeros] = 0
    return values


def _psums_of(params, cmds, rng):
    """Random psums of ``params.fmt`` from the north and the south, as many as ``cmds`` take
    (the counts do not depend on the values: the gates decide them)."""
    if not params.fmt.is_float:
        return _psums_taken(params, cmds, rng)
    counts = [len(side) for side in _psums_taken(params, cmds, rng)]
    return tuple([int(v) for v in numerics.from_float32(rng.normal(0, 40, n))] for n in counts)


def _act_stream(params, rng, outputs=20):
    """Outputs of zero to three AXPYs (on any slot of ``X``, the ones slot now and then, a bad
    slot rarely), MASKs and TOKENS now and then, each closed by a CR, CR_OUT, CR_ACT or
    CR_DELTA (a third each of the last two) with random ``quiet_n`` / ``quiet_s``, ``skip``
    where the row had no AXPY since the last carriage return, and now and then one of this
    row's with a slot outside ``X`` (a CR_ACT's, a CR_DELTA's) or ``Y`` (a CR's), dropped.
    This row's CR_DELTAs mostly come under a MASK that clears some active tokens (in front of
    the AXPYs, now and then between them and the CR_DELTA: the gate it keeps by is the one it
    retires with), so the engine visits tokens the gate left out and writes 0 there; every
    fifth output is one of them, with AXPYs, a MASK and a TOKENS right behind. CR_ACTs and
    CR_DELTAs write slots the AXPYs behind them read, often while the engine is still at work;
    READs of ``X``, LOADs and TOKENS (a new count of active tokens: it waits for the engine)
    right behind some carriage returns."""
    rows, row, n_feat, n_tok = params.rows, params.row, params.n_feat, params.n_tok
    cmds = [pe_model.addr(params, 0), *pe_model.load(params, _operands(params, rng,
                                                                        (n_feat, n_tok)))]
    axpys, chunks = 0, -(-n_tok // 16)

    def a_mask(clears):
        bits = int(rng.integers(0, 1 << 16))
        bits |= 0 if clears else int(rng.choice([0, 0xFFFF]))
        return pe_model.mask(params, int(rng.integers(0, chunks)), bits)

    for k in range(outputs):
        forced = k % 5 == 2         # this row's CR_DELTA under a MASK, a TOKENS right behind
        kind = "delta" if forced else rng.choice(["cr", "raw", "act", "act", "delta", "delta"])
        limit = {"cr": params.n_out, "raw": params.n_out, "act": n_feat, "delta": n_feat}[kind]
        o = int(rng.integers(0, limit * rows))
        if kind == "delta" and (forced or rng.random() < 0.5):     # this row's: it writes X
            o = int(rng.integers(0, limit)) * rows + row
        elif rng.random() < 0.06 and kind != "raw":    # this row's, outside X or Y: dropped
            o = limit * rows + row
        mine = kind == "delta" and o % rows == row
        if rng.random() < 0.1:
            cmds.append(pe_model.tokens(params, int(rng.integers(1, n_tok + 1))))
        if forced or rng.random() < (0.8 if mine else 0.2):
            cmds.append(a_mask(mine))
        for _ in range(int(rng.integers(forced, 4))):
            slot = isa.ONES_SLOT if rng.random() < 0.15 else int(rng.integers(0, n_feat))
            value = int(_operands(params, rng, 1, zeros=0.1)[0])
            cmds.append(pe_model.weight(params, value, slot))
            axpys += 1
        if rng.random() < 0.04:           # a bad slot: not X, not the ones slot
            cmds.append(pe_model.weight(params, 1, int(rng.choice([n_feat, 0xFFFE]))))
        if mine and rng.random() < 0.15:                # the CR_DELTA keeps by this gate
            cmds.append(a_mask(True))
        skip = axpys == 0 and rng.random() < 0.5 and not (kind == "raw" and o % rows == row)
        quiet_n, quiet_s = (bool(v) for v in rng.random(2) < 0.3)
        cmds.append(pe_model.cr(params, o, raw=kind == "raw", act=kind == "act",
                                delta=kind == "delta", quiet_n=quiet_n, quiet_s=quiet_s, skip=skip))
        axpys = 0
        roll = 0.3 if forced else rng.random()
        if roll < 0.15:
            cmds.append(pe_model.read(params, int(rng.integers(0, n_feat)) * n_tok, 2 * n_tok))
        elif roll < 0.25:               # a LOAD right behind: it waits for the engine
            cmds += [pe_model.addr(params, int(rng.integers(0, n_feat * n_tok))),
                     *pe_model.load(params, _operands(params, rng, int(rng.integers(1, 4))))]
        elif roll < 0.4:                # TOKENS right behind: it waits for the engine too
            cmds.append(pe_model.tokens(params, int(rng.integers(1, n_tok + 1))))
    return cmds + [pe_model.tokens(params, n_tok), pe_model.read(params, 0, n_feat * n_tok),
                   pe_model.read(params, Y_BASE, params.n_out * n_tok)]


def _act_words(params, cmds, psums):
    """What the golden model's CR_ACTs and CR_DELTAs of this row do in ``cmds``, command by
    command: the ``out`` words they send, the AXPYs that read a slot one of them wrote, and of
    the CR_DELTAs' words (one for every active token) those where the gate is set (the
    result), those where it is clear (0), and the TOKENS right behind a CR_DELTA."""
    model = pe_model.CoreModel(params)
    model.run([], *psums)
    acts = reads = 0
    deltas = [0, 0, 0]
    written = set()
    writes_x = (ControlOp.CR_ACT.value, ControlOp.CR_DELTA.value)
    behind_delta = False
    for word in cmds:
        fields = isa.WAVELET.unpack(word)
        data = int(fields["data"])
        op = isa.CONTROL.unpack(data)["op"] if fields["ctrl"] else None
        slot = int(isa.CR_ARG.unpack(isa.CONTROL.unpack(data)["arg"])["o"]) // params.rows
        gate = model.gate.copy()
        active = np.arange(params.n_tok) < model.active
        sent = len(model.run([word]).get(params.colors.out, []))
        deltas[2] += int(behind_delta and op == ControlOp.TOKENS.value)
        behind_delta = False
        if op in writes_x:
            acts += sent
            if sent:
                written.add(slot)
            if sent and op == ControlOp.CR_DELTA.value:
                assert sent == active.sum()             # every active token, gated or not
                deltas[0] += int((gate & active).sum())
                deltas[1] += int((~gate & active).sum())
                behind_delta = True
        elif not fields["ctrl"] and fields["color"] == params.colors.weight:
            reads += int(isa.WEIGHT.unpack(data)["slot"]) in written
    return acts, reads, deltas


@pytest.mark.parametrize("seed", range(8))
def test_random_streams_with_activation_carriage_returns(seed):
    """CR_ACTs and CR_DELTAs among CRs and CR_OUTs (:func:`_act_stream`) on each row of
    three, int16: the owner's ReLU'd results (CR_ACT) and, for every active token, results
    kept where the gate is set and 0 where it is clear (CR_DELTA) go out and into ``X`` and
    its masks, and the AXPYs, READs, LOADs and TOKENS behind them see them (a TOKENS waits for
    the engine, so a CR_DELTA's owner visits the tokens active when it retired); random output
    pacing, 2 to 4 buffers, straps and held copies by seed."""
    rng = np.random.default_rng(1300 + seed)
    row = seed % 3
    n_tok, lanes = [(4, 1), (8, 2), (4, 4), (16, 2)][seed % 4]
    params = CoreParams(n_feat=4, n_tok=n_tok, n_out=3, rows=3, row=row, lanes=lanes)
    cmds = _act_stream(params, rng)
    psums = _psums_of(params, cmds, rng)
    acts, reads, deltas = _act_words(params, cmds, psums)
    assert acts and reads and all(deltas)
    pace = rng.random(4000) < 0.7
    counters, cycles = compare(params, cmds, *psums,
                               ready=lambda cycle: bool(pace[cycle % len(pace)]),
                               core_kwargs={"acc_buffers": int(rng.integers(2, 5)),
                                            "straps": seed % 2 == 1,
                                            "held_copies": 1 + seed // 2 % 2})
    print(f"CR_ACT/CR_DELTA stream, row {row} of 3, {n_tok} tokens in {lanes} lanes: {acts} "
          f"results written and sent ({deltas[0]} deltas kept, {deltas[1]} zeroed, "
          f"{deltas[2]} TOKENS right behind a CR_DELTA), {reads} AXPYs of written slots, "
          f"{cycles} cycles, {counters['stall_cycles']} stalls")


@pytest.mark.parametrize("seed", range(3))
def test_random_streams_with_activation_carriage_returns_in_bf16(seed):
    """The same streams in bf16: the ReLU clears every pattern whose sign bit is set, ``-0``
    included, a CR_DELTA keeps negative results where the gate is set (and writes ``+0`` where
    it is clear, over any word), and a zero result's mask bit is clear."""
    from wse.rtl.numfmt import BFloat16

    rng = np.random.default_rng(1400 + seed)
    n_tok, lanes = [(4, 2), (8, 1), (4, 4)][seed]
    params = CoreParams(n_feat=4, n_tok=n_tok, n_out=3, rows=3 if seed else 1, row=0,
                        lanes=lanes, fmt=BFloat16())
    cmds = _act_stream(params, rng, outputs=16)
    psums = _psums_of(params, cmds, rng)
    acts, reads, deltas = _act_words(params, cmds, psums)
    assert acts and reads and all(deltas)
    pace = rng.random(4000) < 0.7
    compare(params, cmds, *psums, ready=lambda cycle: bool(pace[cycle % len(pace)]),
            core_kwargs={"straps": seed == 1})


@pytest.mark.parametrize("fmt", ["int16", "bf16"])
def test_cr_act_writes_the_relu_of_its_result_into_x_and_sends_it(fmt):
    """A CR_ACT of output 1 (this row's slot 1) under a MASK of five tokens: those tokens of
    ``X[1]`` become ``relu(x0)`` (the weight is one) with their mask bits, the other three
    keep their words and bits; the AXPY right behind (weight one, slot 1) reads them while the
    engine is still at work, and a READ of ``X[1]`` shows them. By hand and against the golden
    model, with the output held back every other cycle."""
    from wse.rtl.numfmt import number_format

    params = CoreParams(n_feat=2, n_tok=8, n_out=2, lanes=2, fmt=number_format(fmt))
    x0 = [300, -20, 0, 7, -1, 512, 5, -300]
    x1 = [1, 2, 3, 0, -5, 6, 7, 8]
    if params.fmt.is_float:
        x0, x1 = (list(numerics.encode(params.fmt, np.array(v) / 64)[0]) for v in (x0, x1))
    gate = 0b01110101                                          # tokens 0, 2, 4, 5, 6
    cmds = _x_write_commands(params, x0, x1, gate, act=True)
    relu = numerics.relu(params.fmt, x0)
    want_x1 = [int(relu[t]) if gate >> t & 1 else x1[t] for t in range(8)]
    model = pe_model.CoreModel(params)
    out = model.run(cmds)[params.colors.out]
    assert out[:5] == [int(relu[t]) for t in range(8) if gate >> t & 1]
    assert out[5:13] == [w & 0xFFFFFFFF if not params.fmt.is_float else w for w in want_x1]
    assert list(model.x[1]) == want_x1
    assert list(model.mask[1]) == [not numerics.is_zero(params.fmt, w) for w in want_x1]
    assert list(model.y[0]) == want_x1           # one times X[1], every token (a new gate)
    for ready in (lambda cycle: True, lambda cycle: cycle % 2 == 0):
        _, cycles = compare(params, cmds, ready=ready)
    print(f"{fmt}: a CR_ACT of 5 gated tokens, then an AXPY of its slot: {cycles} cycles in all")


@pytest.mark.parametrize("fmt", ["int16", "bf16"])
def test_an_axpy_of_the_ones_slot_adds_its_weight_to_every_gated_token(fmt):
    """A bias: an AXPY of :data:`~rtl.isa.ONES_SLOT` multiplies the format's one in every
    token, zero activations or not, and costs the busiest bank's gated tokens (all of them, 4
    a bank, then 3 under a MASK); with a zero weight one cycle. So ``Y = b`` on the gated tokens
    (``b`` a weight times one, requantised: ``b`` itself), and a slot past ``X`` that is not
    the ones slot (``n_feat``, 0xFFFE) is an error. By hand and against the golden model."""
    from wse.rtl.numfmt import number_format

    params = CoreParams(n_feat=2, n_tok=8, n_out=3, lanes=2, fmt=number_format(fmt))
    b = [77, -300] if fmt == "int16" else list(numerics.encode(params.fmt, [1.25, -3.5])[0])
    ones = partial(pe_model.weight, params, slot=isa.ONES_SLOT)
    cmds = [pe_model.addr(params, 0), *pe_model.load(params, np.zeros((2, 8), dtype=int)),
            ones(b[0]), pe_model.cr(params, 0),
            pe_model.mask(params, 0, 0b00010111), ones(b[1]), ones(0), pe_model.cr(params, 1),
            pe_model.weight(params, 5, 2), pe_model.weight(params, 5, 0xFFFE),
            pe_model.read(params, Y_BASE, 16)]
    model = pe_model.CoreModel(params)
    model.run(cmds)
    assert list(model.y[0]) == [b[0]] * 8
    assert list(model.y[1]) == [b[1] if 0b00010111 >> t & 1 else 0 for t in range(8)]
    want = model.counters
    assert want["macs_issued"] == 8 + 4 and want["errors"] == 2
    assert want["busy_cycles"] == 1 + 16 + 4 + 1 + 3 + 1 + 2 + 1 + 2 * 16
    counters, cycles = compare(params, cmds)
    print(f"{fmt}: the ones slot: a bias of 8 tokens in 2 lanes costs 4 busy cycles, "
          f"{cycles} cycles in all")


def test_a_load_behind_a_cr_act_waits_for_the_engine_and_lands():
    """The output is held back for 150 cycles, so the CR_ACT's words wait in the engine; the
    LOADs right behind it, into the very words the CR_ACT writes and the next, wait (stall
    cycles, not busy ones) until the engine has written them, then land: the READ sees the
    LOADs' values, not the results, and so does the AXPY of that slot behind them."""
    params = CoreParams(n_feat=2, n_tok=4, n_out=1, lanes=2)
    cmds = [pe_model.addr(params, 0), *pe_model.load(params, [[3, -4, 5, 6], [0, 0, 0, 0]]),
            pe_model.weight(params, 256, 0), pe_model.cr(params, 1, act=True),
            pe_model.addr(params, 4), *pe_model.load(params, [-7, 0, 9]),
            pe_model.weight(params, 256, 1), pe_model.cr(params, 0),
            pe_model.read(params, 0, 8), pe_model.read(params, Y_BASE, 4)]
    model = pe_model.CoreModel(params)
    out = model.run(cmds)[params.colors.out]
    assert out[:4] == [3, 0, 5, 6]                         # the CR_ACT's words
    assert list(model.x[1]) == [-7, 0, 9, 6] and list(model.y[0]) == [-7, 0, 9, 6]
    counters, cycles = compare(params, cmds, ready=lambda cycle: cycle > 150)
    assert counters["stall_cycles"] > 100
    print(f"a LOAD behind a CR_ACT whose words wait 150 cycles for the output: "
          f"{counters['stall_cycles']} stall cycles, {cycles} cycles in all")


@pytest.mark.parametrize("kind", ["act", "delta"])
@pytest.mark.parametrize("rows, row", [(1, 0), (3, 1)])
def test_carriage_return_errors_by_kind_and_row(rows, row, kind):
    """This row's CR_ACT (CR_DELTA) of a slot past ``X`` (``n_feat`` 2, ``n_out`` 4: slot 2)
    is dropped where a CR of it is not, a CR of slot 4 is dropped where a CR_ACT (CR_DELTA) of
    slot 1 is not; on another row a CR_ACT (CR_DELTA) of any slot is a CR (its psums go
    on)."""
    params = CoreParams(n_feat=2, n_tok=4, n_out=4, rows=rows, row=row)
    flag = {kind: True}

    def mine(k):
        return k * rows + row

    cmds = [pe_model.addr(params, 0), *pe_model.load(params, [[1, 2, 3, 4], [5, 0, 7, 8]]),
            pe_model.weight(params, 256, 0), pe_model.cr(params, mine(2), **flag),
            pe_model.weight(params, 256, 1), pe_model.cr(params, mine(2)),
            pe_model.cr(params, mine(4)), pe_model.cr(params, mine(1), **flag),
            pe_model.read(params, Y_BASE, 16), pe_model.read(params, 0, 8)]
    psums = ()
    if rows == 3:      # and another row's CR_ACT (CR_DELTA) of slot 3: a CR here
        cmds[-2:-2] = [pe_model.weight(params, 512, 1), pe_model.cr(params, 9, **flag)]
        psums = (list(range(1, 9)), list(range(20, 28)) + [-5, 6, -7, 8])
    counters, _ = compare(params, cmds, *psums)
    assert counters["errors"] == 2


@pytest.mark.parametrize("fmt", ["int16", "bf16"])
def test_cr_delta_writes_every_active_token_kept_by_the_gate(fmt):
    """A CR_DELTA of output 1 (this row's slot 1) under a MASK of five tokens of eight, all
    eight active: the engine visits all eight, and ``X[1]`` becomes the result (``x0``, the
    weight is one; a negative one kept, no ReLU) at the gated tokens and 0 at the other three,
    whatever the words it replaces (zero words at gated tokens 4 and 5 become their results,
    nonzero ones at 1, 3 and 7 become 0), their mask bits following (a kept result that is
    zero, token 2's, clears its bit); all eight words go out. The AXPY right behind (weight
    one, slot 1) reads them while the engine is still at work, and a READ of ``X[1]`` shows
    them. By hand and against the golden model, with the output held back every other cycle."""
    from wse.rtl.numfmt import number_format

    params = CoreParams(n_feat=2, n_tok=8, n_out=2, lanes=2, fmt=number_format(fmt))
    x0 = [300, -20, 0, 7, -1, 512, 5, -300]
    x1 = [1, 2, 3, 4, 0, 0, 7, 8]
    want_x1 = [300, 0, 0, 0, -1, 512, 5, 0]      # tokens 0, 2, 4, 5, 6 gated; 2's result is 0
    if params.fmt.is_float:
        x0, x1, want_x1 = (list(numerics.encode(params.fmt, np.array(v) / 64)[0])
                           for v in (x0, x1, want_x1))
    gate = 0b01110101                                          # tokens 0, 2, 4, 5, 6
    cmds = _x_write_commands(params, x0, x1, gate, delta=True)
    word = (lambda w: w & 0xFFFFFFFF) if not params.fmt.is_float else int
    model = pe_model.CoreModel(params)
    out = model.run(cmds)[params.colors.out]
    assert out[:8] == [word(w) for w in want_x1]           # the CR_DELTA's words, every token
    assert out[8:16] == [word(w) for w in want_x1]         # the READ of X[1]
    assert list(model.x[1]) == want_x1
    assert list(model.mask[1]) == [1, 0, 0, 0, 1, 1, 1, 0]
    assert list(model.y[0]) == want_x1           # one times X[1], every token (a new gate)
    for ready in (lambda cycle: True, lambda cycle: cycle % 2 == 0):
        _, cycles = compare(params, cmds, ready=ready)
    print(f"{fmt}: a CR_DELTA of 8 active tokens, 5 gated, then an AXPY of its slot: "
          f"{cycles} cycles in all")


def test_cr_delta_overflow_counts_where_its_word_is_zeroed():
    """Row 1 of 2 owns output 3 (slot 1); a MASK gates token 0 off. The engine visits it all
    the same (its ``ACC`` is 0: the AXPY skipped it) and its north psum saturates the
    requantised result: the overflow flag is set although the CR_DELTA writes 0 there, as the
    golden model has it; the word and its mask bit are zero, the other tokens are kept. With a
    small psum there, the same words and no overflow."""
    params = CoreParams(n_feat=2, n_tok=4, n_out=1, lanes=2, rows=2, row=1)
    cmds = [pe_model.addr(params, 0), *pe_model.load(params, [[300, 1, -2, 3], [7, 0, 6, 0]]),
            pe_model.mask(params, 0, 0b1110), pe_model.weight(params, 256, 0),
            pe_model.cr(params, 3, delta=True), pe_model.read(params, 4, 4)]
    for first, overflow in ((2**30, 1), (100, 0)):
        psums = [first, 5, 6, 7]
        model = pe_model.CoreModel(params)
        out = model.run(cmds, psums)[params.colors.out]
        assert list(model.x[1]) == [0, 1, -2, 3] and out[:4] == out[4:8]
        assert list(model.mask[1]) == [0, 1, 1, 1]
        assert model.counters["overflow"] == overflow
        counters, _ = compare(params, cmds, psums)
        assert counters["overflow"] == overflow


@pytest.mark.parametrize("fmt", ["int16", "bf16"])
def test_a_tokens_behind_a_cr_delta_waits_for_the_engine(fmt):
    """Six tokens of eight active; a CR_OUT whose totals wait for the output (held back for
    200 cycles), then, queued behind it, a CR_DELTA under a MASK of tokens 0, 2, 6 and 7 (6
    and 7 inactive), and right behind that a TOKENS of three. The TOKENS waits (stall cycles,
    not busy ones) until the engine is done, so the CR_DELTA's owner visits the six tokens
    active when it retired: ``X[1]`` is the result at 0 and 2 and 0 at 1, 3, 4 and 5, and
    tokens 6 and 7 keep their words; all six words go out. The commands behind the TOKENS (an
    output of the three tokens) do not wait for the engine, and the tail (TOKENS of eight, a
    READ of ``X[1]``, the counters) is sent once the core is idle, so the stall cycles are the
    TOKENS's wait. By hand and against the golden model, bit for bit."""
    from amaranth.sim import Simulator

    from wse.rtl.core import Core
    from wse.rtl.numfmt import number_format

    params = CoreParams(n_feat=2, n_tok=8, n_out=1, lanes=2, fmt=number_format(fmt))
    x0 = [300, -20, 45, 7, -1, 512, 5, -300]
    x1 = [1, 2, 0, 4, -5, 6, 7, 8]
    want_x1 = [300, 0, 45, 0, 0, 0, 7, 8]        # gated 0, 2; 6 and 7 not visited
    if params.fmt.is_float:
        x0, x1, want_x1 = (list(numerics.encode(params.fmt, np.array(v) / 64)[0])
                           for v in (x0, x1, want_x1))
    one = numerics.one(params.fmt)
    word = (lambda w: w & 0xFFFFFFFF) if not params.fmt.is_float else int
    head = [pe_model.addr(params, 0), *pe_model.load(params, [x0, x1]), pe_model.tokens(params, 6),
            pe_model.weight(params, one, 0), pe_model.cr(params, 0, raw=True),
            pe_model.mask(params, 0, 0b1100_0101), pe_model.weight(params, one, 0),
            pe_model.cr(params, 1, delta=True), pe_model.tokens(params, 3),
            pe_model.weight(params, one, 0), pe_model.cr(params, 0, raw=True)]
    tail = [pe_model.tokens(params, 8), pe_model.read(params, 8, 8),
            pe_model.read(params, COUNTER_BASE, len(COUNTERS))]
    model = pe_model.CoreModel(params)
    want = model.run(head + tail)[params.colors.out]
    assert want[6:12] == [word(w) for w in want_x1[:6]]    # the CR_DELTA's six words
    assert want[15:23] == [word(w) for w in want_x1]       # the READ of X[1]
    hold = 200
    dut = Core(params, acc_buffers=4)
    sent, words = [], list(head)

    async def bench(ctx):
        for cycle in range(hold + 600):
            if not words and tail and cycle > hold and ctx.get(dut.idle):
                words.extend(tail)
                tail.clear()
            ctx.set(dut.o.ready, cycle >= hold)
            ctx.set(dut.i.valid, bool(words))
            if words:
                ctx.set(dut.i.payload.as_value(), words[0])
            took = bool(words) and ctx.get(dut.i.ready)
            if ctx.get(dut.o.valid) and ctx.get(dut.o.ready):
                sent.append(ctx.get(dut.o.payload.data))
            await ctx.tick()
            if took:
                words.pop(0)
            if len(sent) == len(want):
                return

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert sent[:-len(COUNTERS)] == want[:-len(COUNTERS)]
    got, counters = (dict(zip(COUNTERS, w[-len(COUNTERS):])) for w in (sent, want))
    for name in COUNTERS:
        if name not in TIMED:
            assert got[name] == counters[name], name
    assert got["stall_cycles"] > hold - 50                 # the TOKENS's wait
    print(f"{fmt}: a TOKENS behind a CR_DELTA queued behind 200 cycles of held output: "
          f"{got['stall_cycles']} stall cycles")


def _x_write_commands(params, x0, x1, gate, **kind):
    """``X[0]`` and ``X[1]`` loaded; under ``gate``, ``X[0]`` times one, closed by a CR_ACT or
    CR_DELTA (``kind``) of slot 1 (over ``X[1]``), then ``X[1]`` times one into ``Y[0]``;
    ``X[1]`` and ``Y[0]`` read back."""
    one = numerics.one(params.fmt)
    return [pe_model.addr(params, 0), *pe_model.load(params, [x0, x1]),
            pe_model.mask(params, 0, gate), pe_model.weight(params, one, 0),
            pe_model.cr(params, 1, **kind),
            pe_model.weight(params, one, 1), pe_model.cr(params, 0),
            pe_model.read(params, 8, 8), pe_model.read(params, Y_BASE, 8)]
