"""cocotb tests of one tile (router + core) against the golden model of the core.

Run through ``tests/test_tile_cocotb.py``. Every test ends by reading the core's counters
through the fabric and comparing them with the model's.
"""

import cocotb
import numpy as np

from wse.fabric import pe_model
from wse.rtl import isa
from wse.rtl.core_params import Y_BASE, CoreParams
from wse.rtl.wavelet import Direction, pack

from .router_tests import pacing
from .tile_tb import TileTB, load_params


async def start(dut, pace="random"):
    params = load_params()
    idle, backpressure = pacing(pace, params.get("seed", 1))
    tb = TileTB(dut, CoreParams.from_dict(params), idle=idle, backpressure=backpressure)
    await tb.start()
    return tb, np.random.default_rng(params.get("seed", 1))


def gemm(core, w, x, *, explicit_zeros):
    """Commands for ``Y = W X`` on one core (rows = 1): LOAD X, each output's nonzero weights
    (and, with ``explicit_zeros``, its zero weights too) closed by a CR, then READ Y."""
    cmds = [pe_model.addr(core, 0), *pe_model.load(core, x)]
    for o, row in enumerate(w):
        for f, value in enumerate(row):
            if value or explicit_zeros:
                cmds.append(pe_model.weight(core, int(value), f))
        cmds.append(pe_model.cr(core, o * core.rows + core.row))
    cmds.append(pe_model.read(core, Y_BASE, len(w) * core.n_tok))
    return cmds


def sparse(rng, shape, zeros, low=-400, high=400):
    values = rng.integers(low, high, shape)
    values[rng.random(shape) < zeros] = 0
    return values


@cocotb.test()
async def gemm_sweep(dut):
    """Activations 0-95 % zeros x weights 0-99 % zeros (half the sweep streams its zero
    weights explicitly); every Y, reply and counter equal to the model's."""
    tb, rng = await start(dut)
    core = tb.core
    for act_zeros in (0.0, 0.5, 0.95):
        for w_zeros in (0.0, 0.9, 0.99):
            x = sparse(rng, (core.n_feat, core.n_tok), act_zeros)
            w = sparse(rng, (core.n_out, core.n_feat), w_zeros)
            await tb.phase(gemm(core, w, x, explicit_zeros=w_zeros == 0.9))
            counters = await tb.check_counters()
            cocotb.log.info("gemm %d%% zero activations, %d%% zero weights: bit-exact; busy %d, "
                            "issued %d, skipped weight %d act %d, cycle %d",
                            act_zeros * 100, w_zeros * 100, counters["busy_cycles"],
                            counters["macs_issued"], counters["macs_skipped_weight"],
                            counters["macs_skipped_act"], tb.cycle)


@cocotb.test()
async def saturation(dut):
    """Accumulators and results saturating both ways, overflow flag and counter."""
    tb, rng = await start(dut, "bursty")
    core = tb.core
    x = np.full((core.n_feat, core.n_tok), 32767)
    x[:, ::2] = -32768
    w = np.full((core.n_out, core.n_feat), 32767)
    w[1::2] = -32768
    await tb.phase(gemm(core, w, x, explicit_zeros=False))
    counters = await tb.check_counters()
    assert counters["overflow"] == 1 and int(dut.overflow.value) == 1
    # Sums exactly halfway between two results (round half to even, frac_bits 8).
    halves = np.resize([1, 3, 5, -1, -3, -5, 2, 7], (core.n_feat, core.n_tok))
    await tb.phase(gemm(core, np.full((1, core.n_feat), 0) + np.eye(1, core.n_feat, dtype=int)
                        * 128, halves, explicit_zeros=False))
    await tb.check_counters()
    cocotb.log.info("saturation and half-way rounding: bit-exact, overflow flagged; cycle %d",
                    tb.cycle)


@cocotb.test()
async def bad_inputs(dut):
    """Every kind of bad command is dropped and counted; the core keeps working after."""
    tb, rng = await start(dut, "full")
    core = tb.core
    c = core.colors
    n_x = core.n_feat * core.n_tok
    await tb.phase([pe_model.addr(core, n_x - 1), *pe_model.load(core, [5, 6]),
                    pe_model.weight(core, 3, core.n_feat),
                    int(pack(isa.control_data(0xF), c.weight, 1)),      # unknown opcode
                    pe_model.cr(core, core.n_out * core.rows),
                    pe_model.read(core, 0x7FFF, 2)])
    counters = await tb.check_counters()
    assert counters["errors"] == 5 and int(dut.core_error.value) == 1
    x = sparse(rng, (core.n_feat, core.n_tok), 0.3)
    w = sparse(rng, (2, core.n_feat), 0.5)
    await tb.phase(gemm(core, w, x, explicit_zeros=False))
    await tb.check_counters()
    cocotb.log.info("bad inputs: 5 errors counted as modelled, then a GEMM bit-exact")


@cocotb.test()
async def partial_sums(dut):
    """A middle row: psums in from N and S, out towards the owner, results where owned."""
    tb, rng = await start(dut)
    core = tb.core
    assert core.rows > 1, "partial_sums needs a tile built for a mesh of several rows"
    x = sparse(rng, (core.n_feat, core.n_tok), 0.3)
    w = sparse(rng, (core.rows, core.n_feat), 0.5)
    cmds = [pe_model.addr(core, 0), *pe_model.load(core, x)]
    for o, row in enumerate(w):
        cmds += [pe_model.weight(core, int(v), f) for f, v in enumerate(row) if v]
        cmds.append(pe_model.cr(core, o))
    n_from_n = core.n_tok * sum(1 for o in range(core.rows) if 0 < core.row <= o % core.rows)
    n_from_s = core.n_tok * sum(1 for o in range(core.rows)
                                if o % core.rows <= core.row < core.rows - 1)
    sent = await tb.phase(cmds, [int(v) for v in rng.integers(-9000, 9000, n_from_n)],
                          [int(v) for v in rng.integers(-9000, 9000, n_from_s)])
    await tb.phase([pe_model.read(core, Y_BASE, core.n_tok)])
    await tb.check_counters()
    cocotb.log.info("partial sums at row %d of %d: bit-exact, %d psums in, %s out; cycle %d",
                    core.row, core.rows, n_from_n + n_from_s,
                    {k: len(v) for k, v in sent.items() if v}, tb.cycle)


@cocotb.test()
async def select(dut):
    """SELECT (``docs/pe.md``, "Selection"): a core of column ``col`` > 0 keeps only the ``cmd``
    wavelets after a SELECT of its column (column 0 is selected after reset); weights it keeps
    whatever is selected. The commands it discards are taken one a cycle, while a long READ of
    its own still runs: they never hold up the row."""
    tb, rng = await start(dut, "full")
    core = tb.core
    assert core.col > 0, "select needs a tile of a column other than 0"
    n_x = core.n_feat * core.n_tok
    x = sparse(rng, (core.n_feat, core.n_tok), 0.3)
    junk = [int(v) for v in rng.integers(-999, 999, n_x)]
    others = [c for c in range(core.cols) if c != core.col]
    await tb.phase([pe_model.addr(core, 0), *pe_model.load(core, junk),      # column 0's
                    pe_model.select(core, others[-1]), pe_model.addr(core, 0),
                    *pe_model.load(core, junk),
                    pe_model.select(core), pe_model.addr(core, 0), *pe_model.load(core, x),
                    pe_model.select(core, 1 << 20), *pe_model.load(core, junk),   # no column
                    pe_model.select(core), pe_model.read(core, 0, n_x)])
    assert (tb.model.x == x).all()
    # weights go to every core of the row, selected or not; READs only to the selected one
    w = sparse(rng, (2, core.n_feat), 0.5)
    cmds = [pe_model.select(core, others[0])]
    for o, row in enumerate(w):
        cmds += [pe_model.weight(core, int(v), f) for f, v in enumerate(row) if v]
        cmds.append(pe_model.cr(core, o * core.rows + core.row))
    cmds += [pe_model.read(core, Y_BASE, 2 * core.n_tok), pe_model.select(core),
             pe_model.read(core, Y_BASE, 2 * core.n_tok)]
    await tb.phase(cmds)
    # a long READ of its own, then three LOADs (room in the command FIFO), then another
    # column's commands: discarded as they come, long before the READ is over
    start_at = len(tb.accepted[Direction.W])
    discarded = 40
    await tb.phase([pe_model.read(core, 0, 100), pe_model.addr(core, 0),
                    *pe_model.load(core, x.ravel()[:2]), pe_model.select(core, others[0]),
                    *pe_model.load(core, junk[:discarded])])
    cycles = tb.accepted[Direction.W][start_at:]
    assert cycles[-1] - cycles[-discarded] == discarded - 1, "discarded words were held up"
    assert cycles[-1] - cycles[0] < 100, "another column's commands waited for the READ"
    await tb.phase([pe_model.select(core)])
    counters = await tb.check_counters()
    cocotb.log.info("select: column %d of %d kept its own commands only, %d wavelets kept, "
                    "%d discarded one a cycle during a READ; cycle %d", core.col, core.cols,
                    counters["wavelets_in"], discarded, tb.cycle)
