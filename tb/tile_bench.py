"""cocotb module that measures one tile's core: what a weight costs, what a CR costs.

Run by ``wse bench pe`` (through :mod:`bench.pe`, test ``pe_figures``). Weights stream in from W
at full rate; a weight's cost is measured where the host sees it, as the spacing of accepted
weights at the W port over a long stream, and cross-checked with the core's own
``busy_cycles``. Every phase also goes through the golden model (outputs and counters must
agree). Figures are written as JSON to ``WSE_BENCH_OUT``. ``masked`` (run by
``tests/test_tile_cocotb.py``) does the same for masked GEMMs (``docs/pe.md``, MASK): what a
gated weight costs, and a masked GEMM bit-exact.
"""

import json
import os

import cocotb
import numpy as np

from wse.fabric import numerics, pe_model
from wse.rtl import isa
from wse.rtl.core_params import Y_BASE, CoreParams
from wse.rtl.wavelet import Direction, unpack

from .tile_tb import TileTB, load_params

DENSITIES = (1.0, 0.75, 0.5, 0.25, 0.05)
FILL = 16      # commands that can sit in the router queue and the core's FIFO


def operands(core, ints):
    """``ints`` (nonzero integers) as ``core``'s operands: themselves in fixed point; in bf16
    the bit patterns of ``ints / 16`` rounded to bf16 (normal numbers, never zero)."""
    ints = np.asarray(ints, dtype=np.int64)
    if not core.fmt.is_float:
        return ints
    return numerics.encode(core.fmt, ints / 16)[0]


def zero_weight(core, k):
    """The ``k``-th zero weight: ``0``, and in bf16 ``-0`` every other one (skipped alike)."""
    return 0x8000 if core.fmt.is_float and k % 2 else 0


def spaced_activations(core, rng, nonzero):
    """``X`` whose every slot has ``nonzero`` nonzero tokens, spread evenly over the banks."""
    x = np.zeros((core.n_feat, core.n_tok), dtype=np.int64)
    for f in range(core.n_feat):
        banks = [list(rng.permutation(range(b, core.n_tok, core.lanes)))
                 for b in range(core.lanes)]
        tokens = [banks[k % core.lanes][k // core.lanes] for k in range(nonzero)]
        x[f, tokens] = operands(core, rng.integers(1, 200, nonzero)
                                * rng.choice([-1, 1], nonzero))
    return x


async def stream_cost(tb, commands):
    """Send ``commands``; return (cycles per command at the W port, busy cycles per command)."""
    before_busy = (await tb.check_counters())["busy_cycles"]
    mark = len(tb.accepted[Direction.W])
    await tb.phase(commands)
    # Steady state: skip the first commands, which only fill the router queue and core FIFO.
    cycles = tb.accepted[Direction.W][mark + FILL:]
    busy = (await tb.check_counters())["busy_cycles"] - before_busy
    # The READ of the counters itself costs 1 + 2 cycles per counter word.
    busy -= 1 + 2 * len(pe_model.COUNTERS)
    return (cycles[-1] - cycles[0]) / (len(cycles) - 1), busy / len(commands)


@cocotb.test()
async def pe_figures(dut):
    params = load_params()
    core = CoreParams.from_dict(params)
    rng = np.random.default_rng(params.get("seed", 1))
    n = int(params.get("weights", 400))
    tb = TileTB(dut, core)
    await tb.start()
    figures = {"lanes": core.lanes, "n_tok": core.n_tok, "weights_per_point": n,
               "format": core.fmt.name,
               "cycles_per_weight": {}, "busy_cycles_per_weight": {}, "nonzero_per_slot": {},
               "ideal_cycles_per_weight": {}, "fixed_overhead_cycles": {}}
    for density in DENSITIES:
        nonzero = max(1, round(density * core.n_tok))
        x = spaced_activations(core, rng, nonzero)
        await tb.phase([pe_model.addr(core, 0), *pe_model.load(core, x)])
        weights = [pe_model.weight(core, int(v), int(f)) for v, f in
                   zip(operands(core, rng.integers(1, 300, n)), rng.integers(0, core.n_feat, n))]
        measured, busy = await stream_cost(tb, weights)
        ideal = nonzero / core.lanes
        key = f"{density:.2f}"
        figures["nonzero_per_slot"][key] = nonzero
        figures["cycles_per_weight"][key] = round(measured, 3)
        figures["busy_cycles_per_weight"][key] = round(busy, 3)
        figures["ideal_cycles_per_weight"][key] = ideal
        figures["fixed_overhead_cycles"][key] = round(measured - ideal, 3)

    zero_weights = [pe_model.weight(core, zero_weight(core, k), int(f))
                    for k, f in enumerate(rng.integers(0, core.n_feat, n))]
    figures["zero_weight_cycles"], _ = await stream_cost(tb, zero_weights)

    # CR overhead: the same weights with a CR after every `per_output` of them, and with only
    # the final CR (both end by draining one reduction). Enough weights per output that the
    # partial-sum engine (a token per cycle, n_tok + 2 cycles an output) keeps up.
    x = spaced_activations(core, rng, core.n_tok)
    await tb.phase([pe_model.addr(core, 0), *pe_model.load(core, x)])
    per_output = max(2, -(-(core.n_tok + 4) * core.lanes // core.n_tok))
    outputs = core.n_out * 4
    weights = [pe_model.weight(core, int(v), int(f)) for v, f in
               zip(operands(core, rng.integers(1, 300, per_output * outputs)),
                   rng.integers(0, core.n_feat, per_output * outputs))]
    plain = await _elapsed(tb, weights + [pe_model.cr(core, 0)])
    with_cr = []
    for o in range(outputs):
        with_cr += weights[o * per_output:(o + 1) * per_output]
        with_cr.append(pe_model.cr(core, o % core.n_out))
    crs = await _elapsed(tb, with_cr)
    figures["cr_overhead_cycles"] = round((crs - plain) / (outputs - 1), 3)
    figures["weights_per_output_in_cr_test"] = per_output
    # The other regime: CRs back to back, so the partial-sum engine sets the pace.
    back_to_back = await _elapsed(tb, [pe_model.cr(core, o % core.n_out) for o in range(outputs)])
    single = await _elapsed(tb, [pe_model.cr(core, 0)])
    figures["psum_engine_cycles_per_output"] = round((back_to_back - single) / (outputs - 1), 3)

    # Nonzeros at random tokens rather than spread over the banks: the busiest bank sets the pace.
    density = 0.25
    x = np.zeros((core.n_feat, core.n_tok), dtype=np.int64)
    for f in range(core.n_feat):
        tokens = rng.choice(core.n_tok, round(density * core.n_tok), replace=False)
        x[f, tokens] = operands(core, rng.integers(1, 200, tokens.size))
    await tb.phase([pe_model.addr(core, 0), *pe_model.load(core, x)])
    weights = [pe_model.weight(core, int(v), int(f)) for v, f in
               zip(operands(core, rng.integers(1, 300, n)), rng.integers(0, core.n_feat, n))]
    measured, _ = await stream_cost(tb, weights)
    figures["random_placement"] = {
        "density": density, "cycles_per_weight": round(measured, 3),
        "ideal_cycles_per_weight": density * core.n_tok / core.lanes,
        "model_cycles_per_weight": round(float(np.mean([
            pe_model.axpy_cycles(core, x[int(isa.WEIGHT.unpack(unpack(w)[0])["slot"])] != 0)
            for w in weights[FILL:]])), 3)}

    counters = await tb.check_counters()
    figures["macs_issued"] = counters["macs_issued"]
    figures["macs_skipped_weight"] = counters["macs_skipped_weight"]
    figures["macs_skipped_act"] = counters["macs_skipped_act"]
    figures["macs_skipped"] = counters["macs_skipped_weight"] + counters["macs_skipped_act"]
    with open(os.environ["WSE_BENCH_OUT"], "w") as file:
        json.dump(figures, file, indent=2)


async def _elapsed(tb, commands):
    """Cycles from the first command accepted at W to the last one processed (its READ)."""
    mark = len(tb.accepted[Direction.W])
    await tb.phase(commands)
    first = tb.accepted[Direction.W][mark]
    await tb.check_counters()          # returns once the core has finished everything before
    return tb.cycle - first


@cocotb.test()
async def masked(dut):
    """MASKs on a core of column ``col`` > 0 with several chunks of 16 tokens: a masked GEMM
    (this column's MASKs on ``weight`` and ``cmd``, other columns' on both, a chunk past the
    core's tokens, CRs and CR_OUTs that open the gate again) bit-exact with the golden model,
    whose results are the masked product; then a weight gated to ``k`` tokens a bank costs
    ``k`` cycles at the W port, as the model says."""
    params = load_params()
    core = CoreParams.from_dict(params)
    assert core.col > 0 and core.n_tok > 16, "masked needs column > 0 and several chunks"
    rng = np.random.default_rng(params.get("seed", 1))
    tb = TileTB(dut, core)
    await tb.start()
    chunks = core.n_tok // isa.MASK_CHUNK
    others = [k for k in range(core.cols) if k != core.col] + [core.col + 4]
    x = rng.integers(-300, 300, (core.n_feat, core.n_tok))
    x[rng.random(x.shape) < 0.3] = 0
    w = rng.integers(-300, 300, (core.n_out, core.n_feat))
    w[rng.random(w.shape) < 0.5] = 0
    gate = rng.random((core.n_out, core.n_tok)) < 0.4
    gate[1] = True                                   # an output without MASKs
    cmds = [pe_model.select(core), pe_model.addr(core, 0), *pe_model.load(core, x)]
    for o in range(core.n_out):
        color = core.colors.cmd if o % 2 else core.colors.weight
        for k in range(chunks):
            bits = int((gate[o, 16 * k:16 * k + 16].astype(int) << np.arange(16)).sum())
            cmds.append(pe_model.mask(core, int(rng.integers(0, chunks + 1)), 0xFFFF,
                                      col=int(rng.choice(others)), color=color))
            if bits != 0xFFFF:
                cmds.append(pe_model.mask(core, k, bits, color=color))
        if o == 2:
            cmds.append(pe_model.mask(core, chunks, 0))          # no token there: an error
        cmds += [pe_model.weight(core, int(v), f) for f, v in enumerate(w[o]) if v]
        cmds.append(pe_model.cr(core, o, raw=o == 3))
    cmds.append(pe_model.read(core, Y_BASE, core.n_out * core.n_tok))
    sent = await tb.phase(cmds)
    counters = await tb.check_counters()
    exact = (w @ x) * gate
    rounded = np.round(exact / 2 ** core.fmt.frac_bits).astype(np.int64)
    rounded[3] = 0                                               # a CR_OUT leaves Y alone
    assert (tb.model.y == rounded).all() and counters["errors"] == 1
    # the CR_OUT's totals of its gated tokens alone (the engine visits no other), then Y
    raw = sent[Direction.E][:int(gate[3].sum())]
    assert raw == [int(v) & 0xFFFFFFFF for v in exact[3][gate[3]]]
    assert counters["macs_issued"] == int(((w != 0).astype(int) @ (x != 0) * gate).sum())

    # the cost of a gated weight: every token nonzero, k gated on in each bank
    x = rng.integers(1, 300, (core.n_feat, core.n_tok))
    await tb.phase([pe_model.addr(core, 0), *pe_model.load(core, x)])
    k = max(1, core.tpb // 4)
    on = np.zeros(core.n_tok, dtype=bool)
    on[:k * core.lanes] = True
    await tb.phase([pe_model.mask(core, c, int((on[16 * c:16 * c + 16].astype(int)
                                                 << np.arange(16)).sum()))
                    for c in range(chunks)])
    n = int(params.get("weights", 120))
    weights = [pe_model.weight(core, int(v), int(f)) for v, f in
               zip(rng.integers(1, 300, n), rng.integers(0, core.n_feat, n))]
    measured, busy = await stream_cost(tb, weights)
    assert pe_model.axpy_cycles(core, x[0] != 0, on) == k == busy
    assert abs(measured - k) < 0.05, f"a weight gated to {k} tokens a bank took {measured}"
    await tb.phase([pe_model.cr(core, 0)])
    cocotb.log.info("masked GEMM at column %d of %d, %d tokens: bit-exact, %d MACs issued; "
                    "a weight gated to %d of %d tokens a bank costs %.2f cycles; cycle %d",
                    core.col, core.cols, core.n_tok, counters["macs_issued"], k, core.tpb,
                    measured, tb.cycle)
