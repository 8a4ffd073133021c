"""The core's golden model (``fabric/pe_model.py``) against hand-computed cases from
``docs/pe.md``."""

import numpy as np
import pytest

from wse.fabric.pe_model import (
    COUNTER_BASE,
    COUNTERS,
    Y_BASE,
    CoreColors,
    CoreModel,
    CoreParams,
    addr,
    axpy_cycles,
    cr,
    load,
    mask,
    read,
    select,
    selection,
    tokens,
    weight,
)
from wse.rtl import isa
from wse.rtl.numfmt import FixedPoint
from wse.rtl.wavelet import ControlOp, pack

ACC_MAX, ACC_MIN = 2**31 - 1, -2**31
C = CoreColors()


def core(**kwargs):
    params = CoreParams(**kwargs)
    return params, CoreModel(params)


def u32(values):
    return [v & 0xFFFFFFFF for v in values]


def raw(data, color, ctrl=0):
    return int(pack(data, color, ctrl))


def loaded(params, x):
    """Wavelets loading all of ``x`` from address 0."""
    return [addr(params, 0), *load(params, x)]


# AXPY ---------------------------------------------------------------------------------------------

def test_axpy_skips_zeros_and_counts_macs():
    p, m = core(n_feat=4, n_tok=8, n_out=2)
    row = [1, 0, -2, 0, 3, 0, 0, 4]
    out = m.run([addr(p, 2 * 8), *load(p, row), weight(p, 3, 2), weight(p, 0, 2),
                 weight(p, -1, 2), weight(p, 5, 0)])
    assert out == {C.psum_to_s: [], C.psum_to_n: [], C.out: []}
    assert m.x[2].tolist() == row and (m.mask == (m.x != 0)).all() and m.ptr == 24
    assert m.acc.tolist() == [2, 0, -4, 0, 6, 0, 0, 8]
    # ADDR 1 + LOAD 8 + AXPY 4 (4 nonzero, one bank) + zero weight 1 + AXPY 4 + empty slot 1
    assert m.counters == {"busy_cycles": 19, "macs_issued": 8, "macs_skipped_weight": 8,
                          "macs_skipped_act": 4 + 4 + 8, "wavelets_in": 13, "wavelets_out": 0,
                          "stall_cycles": 0, "errors": 0, "overflow": 0}
    assert not m.error


def test_axpy_saturates_both_ways_and_state_persists_across_runs():
    p, m = core(n_feat=1, n_tok=8, n_out=1)
    m.run([*loaded(p, [32767] * 4 + [-32768] * 4), weight(p, 32767, 0), weight(p, 32767, 0)])
    assert m.acc.tolist() == [2 * 32767 * 32767] * 4 + [-2 * 32768 * 32767] * 4
    assert m.counters["overflow"] == 0
    m.run([weight(p, 32767, 0)])
    assert m.acc.tolist() == [ACC_MAX] * 4 + [ACC_MIN] * 4
    assert m.counters["overflow"] == 1 and m.counters["macs_issued"] == 24
    assert m.counters["wavelets_in"] == 12 and not m.error


@pytest.mark.parametrize("lanes, nonzero, cycles", [
    (1, [0, 2, 4, 6], 4), (2, [0, 2, 4, 6], 4), (4, [0, 2, 4, 6], 2),
    (2, [0, 1, 2, 3], 2), (4, [0, 1, 2, 3], 1), (4, [1, 5, 6, 7], 2), (2, [], 1),
])
def test_axpy_costs_the_busiest_bank(lanes, nonzero, cycles):
    p, m = core(n_feat=2, n_tok=8, n_out=1, lanes=lanes)
    assert p.tpb == 8 // lanes
    row = np.zeros(8, dtype=np.int64)
    row[nonzero] = 7
    assert axpy_cycles(p, row != 0) == cycles
    m.run(loaded(p, [row, row]))
    before = m.counters["busy_cycles"]
    m.run([weight(p, 1, 1)])
    assert m.counters["busy_cycles"] - before == cycles
    m.run([weight(p, 0, 1)])
    assert m.counters["busy_cycles"] - before == cycles + 1


# MASK and the gate -------------------------------------------------------------------------------

def test_mask_gates_the_axpys_of_one_output():
    """Two chunks of 16 tokens (lanes 2): an AXPY multiplies the nonzero tokens whose gate bit
    is set, costs its busiest bank of those, counts the others as skipped activations; the CR
    that takes effect sets every gate bit again."""
    p, m = core(n_feat=2, n_tok=32, n_out=2, lanes=2, col=1, cols=2)
    x = np.arange(1, 65).reshape(2, 32)
    x[1, ::3] = 0
    m.run([select(p), *loaded(p, x)])              # column 1: SELECT it first
    assert m.gate.all()
    before = dict(m.counters)
    # chunk 0: tokens 0, 2, 4 and 5; chunk 1: tokens 16..23 (bits 0..7)
    m.run([mask(p, 0, 0b110101), mask(p, 1, 0x00FF), weight(p, 2, 0), weight(p, 3, 1)])
    gate = np.zeros(32, dtype=bool)
    gate[[0, 2, 4, 5, *range(16, 24)]] = True
    assert m.gate.tolist() == gate.tolist()
    live1 = gate & (x[1] != 0)
    assert m.acc.tolist() == (2 * x[0] * gate + 3 * x[1] * live1).tolist()
    issued = int(gate.sum() + live1.sum())
    # per bank (even, odd tokens): slot 0 gates 7 even tokens on, 5 odd; slot 1 fewer
    cycles = 2 + axpy_cycles(p, gate) + axpy_cycles(p, x[1] != 0, gate)
    assert axpy_cycles(p, gate) == 7 and axpy_cycles(p, x[1] != 0, gate) == 5
    delta = {k: m.counters[k] - before[k] for k in before}
    assert delta == {"busy_cycles": cycles, "macs_issued": issued, "macs_skipped_weight": 0,
                     "macs_skipped_act": 64 - issued, "wavelets_in": 4, "wavelets_out": 0,
                     "stall_cycles": 0, "errors": 0, "overflow": 0}
    acc = m.acc.copy()
    m.run([cr(p, 0)])
    assert m.gate.all() and m.y[0].tolist() == np.round(acc / 256).astype(int).tolist()
    m.run([weight(p, 1, 0)])                     # every token again
    assert m.acc.tolist() == x[0].tolist() and not m.error


def test_the_engine_visits_the_gated_tokens_alone():
    """A CR hands the engine its gate with the buffer: the middle row of three takes psums
    from both sides for the gated tokens only, sends the sums of those alone, and the owner
    writes those tokens of ``Y`` and leaves the others as they were; a CR_OUT sends only the
    gated totals."""
    p, m = core(n_feat=1, n_tok=8, n_out=2, row=1, rows=3)
    c = p.colors
    m.run([*loaded(p, range(1, 9))])
    m.y[1] = 77
    gate = [0, 1, 1, 0, 0, 0, 0, 1]
    bits = sum(b << j for j, b in enumerate(gate))
    out = m.run([mask(p, 0, bits), weight(p, 2, 0), cr(p, 3 * 1 + 0)],    # owner row 0
                psum_from_s=[10, 20, 30])          # row 1 below the owner: sums go north
    assert out[c.psum_to_n] == [2 * 2 + 10, 2 * 3 + 20, 2 * 8 + 30]
    assert m.gate.all() and not m.error
    out = m.run([mask(p, 0, bits), weight(p, 1, 0), cr(p, 3 * 1 + 1)],    # owner: this row
                psum_from_n=[100, 200, 300], psum_from_s=[1000, 2000, 3000])
    assert m.y[1].tolist() == [77, 4, 9, 77, 77, 77, 77, 13]       # (2 + 100 + 1000) / 256, ...
    out = m.run([mask(p, 0, bits), weight(p, 256, 0), cr(p, 3 * 1 + 1, raw=True)],
                psum_from_n=[1, 2, 3], psum_from_s=[4, 5, 6])
    assert out[c.out] == [2 * 256 + 5, 3 * 256 + 7, 8 * 256 + 9]


def test_tokens_sets_the_active_tokens_and_the_gate_every_cr_leaves():
    p, m = core(n_feat=1, n_tok=8, n_out=1, lanes=2)
    c = p.colors
    m.run([*loaded(p, [1] * 8), tokens(p, 3)])
    assert m.active == 3 and m.gate.tolist() == [True] * 3 + [False] * 5
    assert m.counters["busy_cycles"] == 1 + 8 + 1
    out = m.run([weight(p, 256, 0), cr(p, 0, raw=True)])
    assert out[c.out] == [256] * 3                     # the engine walks the active tokens
    assert m.gate.tolist() == [True] * 3 + [False] * 5
    assert m.counters["macs_issued"] == 3 and m.counters["macs_skipped_act"] == 5
    m.run([mask(p, 0, 0xFF), weight(p, 256, 0), cr(p, 0, raw=True)])   # a MASK may open more
    assert m.gate.sum() == 3
    m.run([tokens(p, 9)])                              # past n_tok: an error, nothing changes
    assert m.counters["errors"] == 1 and m.active == 3
    m.run([tokens(p, 0), weight(p, 256, 0)])
    assert m.active == 0 and not m.acc.any()
    assert m.run([cr(p, 0, raw=True)])[c.out] == []
    m.run([tokens(p, 8)])
    assert m.gate.all()


def test_loads_and_reads_step_over_the_inactive_tokens():
    """With 3 of 8 tokens active, LOADs fill tokens 0..2 of each feature in turn and a READ of
    ``X`` or ``Y`` returns those alone; counters read word after word as ever."""
    p, m = core(n_feat=3, n_tok=8, n_out=2)
    c = p.colors
    m.run([tokens(p, 3), addr(p, 0), *load(p, range(1, 10))])
    assert m.x[:, :3].tolist() == [[1, 2, 3], [4, 5, 6], [7, 8, 9]] and not m.x[:, 3:].any()
    assert m.ptr == 3 * 8
    assert m.run([read(p, 0, 9)])[c.out] == list(range(1, 10))
    assert m.run([read(p, 8 + 1, 3)])[c.out] == [5, 6, 7]       # from the middle of a row
    m.run([weight(p, 512, 0), cr(p, 0), weight(p, 256, 1), cr(p, 1)])
    assert m.run([read(p, Y_BASE, 6)])[c.out] == [2, 4, 6, 4, 5, 6]
    counters = m.run([read(p, COUNTER_BASE, 3)])[c.out]
    assert len(counters) == 3 and counters[1] == 6              # busy, macs_issued, ...
    assert not m.error


def test_a_mask_past_the_cores_tokens_is_an_error_and_a_dropped_cr_keeps_the_gate():
    p, m = core(n_feat=1, n_tok=8, n_out=1)
    m.run([*loaded(p, [1] * 8), mask(p, 0, 0xFF0F)])     # bits past token 7: no token
    assert m.gate.tolist() == [True] * 4 + [False] * 4
    m.run([mask(p, 1, 0), mask(p, 63, 0)])               # chunks 1 and 63: 16 >= n_tok
    assert m.counters["errors"] == 2 and m.error and m.gate.sum() == 4
    assert m.counters["busy_cycles"] == 1 + 8 + 3        # ADDR, LOADs, three MASKs
    m.run([cr(p, 1), weight(p, 5, 0)])                   # slot 1 outside Y: dropped
    assert m.counters["errors"] == 3 and m.acc.tolist() == [5] * 4 + [0] * 4
    m.run([cr(p, 0), weight(p, 5, 0)])
    assert m.acc.tolist() == [5] * 8 and m.gate.all()
    p, m = core(n_feat=1, n_tok=32, n_out=1, lanes=4)
    m.run([mask(p, 2, 0), mask(p, 1, 0)])               # 32 tokens: chunk 2 is past them
    assert m.counters["errors"] == 1 and m.gate.tolist() == [True] * 16 + [False] * 16


def test_masks_of_other_columns_are_discarded_and_not_counted():
    """Only the core of the MASK's column keeps it (on ``weight``, and on ``cmd`` while that
    column is selected); the others take it from the ramp as if it was never there. A MASK on a
    foreign color is dropped as that color's wavelets are."""
    p, m = core(n_feat=1, n_tok=16, n_out=1, col=2, cols=3)
    c = p.colors
    m.run([mask(p, 0, 0, col=0), mask(p, 0, 0, col=1, color=c.cmd),
           mask(p, 0, 0, col=2 + 8), mask(p, 0, 0, col=63)])
    assert m.gate.all() and m.counters == dict.fromkeys(COUNTERS, 0)
    m.run([mask(p, 0, 0, color=c.cmd)])                 # its own, but column 0 is selected
    assert m.gate.all() and m.counters["wavelets_in"] == 0
    m.run([select(p), mask(p, 0, 1, color=c.cmd), mask(p, 0, 3, col=0, color=c.cmd)])
    assert m.gate.sum() == 1 and m.counters["wavelets_in"] == 1
    assert m.counters["busy_cycles"] == 1
    m.run([mask(p, 0, 0, color=30), mask(p, 0, 0, col=0, color=30)])
    assert m.counters["errors"] == 2 and m.gate.sum() == 1 and m.counters["wavelets_in"] == 3
    # selection() alone: its col argument is the whole argument, a MASK's col its top bits
    ops = [9, 9, 9, 8, 9]
    args = [int(isa.MASK_ARG.pack(col=k, chunk=1, bits=5)) for k in (2, 1, 2)] + [2, 2 << 22]
    kept, selected = selection(p, 0, [c.weight, c.weight, c.cmd, c.cmd, c.cmd], [1] * 5, ops,
                               args)
    assert kept == [True, False, False, False, True] and selected == 2


# CR and the partial-sum engine --------------------------------------------------------------------

def test_cr_requantises_half_to_even_into_y():
    p, m = core(n_feat=1, n_tok=8, n_out=4)
    out = m.run([*loaded(p, [1, 3, -1, -3, 129, 131, 0, 2]), weight(p, 128, 0), cr(p, 3)])
    # acc = 128 * x = 0.5, 1.5, -0.5, -1.5, 64.5, 65.5, 0, 1 in units of 256
    assert m.y[3].tolist() == [0, 2, 0, -2, 64, 66, 0, 1]
    assert not m.y[:3].any() and not m.acc.any()
    assert out == {C.psum_to_s: [], C.psum_to_n: [], C.out: []}
    assert m.counters["busy_cycles"] == 1 + 8 + 7 + 0 and m.counters["overflow"] == 0


def test_requantise_saturates_and_sets_overflow():
    p, m = core(n_feat=1, n_tok=2, n_out=1)
    m.run([*loaded(p, [32767, -32768]), weight(p, 32767, 0), cr(p, 0)])
    assert m.y[0].tolist() == [32767, -32768] and m.counters["overflow"] == 1


@pytest.mark.parametrize("row", [0, 1, 2])
def test_psum_roles_for_three_rows_with_owner_one(row):
    p, m = core(n_feat=1, n_tok=4, n_out=2, row=row, rows=3)
    acc = [256, -512, 768, -1024]
    from_n = [10, -20, 30, -40]
    from_s = [256, 512, 768, 1024]
    program = [*loaded(p, [1, -2, 3, -4]), weight(p, 256, 0), cr(p, 4)]   # owner 1, slot 1
    if row == 1:   # from_s interleaved in the ramp, from_n as a list
        program[3:3] = [raw(v, C.psum_from_s) for v in from_s]
        out = m.run(program, psum_from_n=from_n)
        # (256+10+256, -512-20+512, 768+30+768, -1024-40+1024) / 256, half to even
        assert m.y[1].tolist() == [2, 0, 6, 0] and not m.y[0].any()
        assert out[C.psum_to_s] == [] and out[C.psum_to_n] == []
    else:
        out = m.run(program)
        to, other = (C.psum_to_s, C.psum_to_n) if row == 0 else (C.psum_to_n, C.psum_to_s)
        assert out[to] == u32(acc) and out[other] == [] and not m.y.any()
        assert m.counters["wavelets_out"] == 4
    assert out[C.out] == [] and not m.acc.any() and not m.error


@pytest.mark.parametrize("o, takes, sends", [(2, "n", C.psum_to_s), (0, "s", C.psum_to_n)])
def test_middle_row_that_does_not_own_adds_one_side_and_forwards(o, takes, sends):
    p, m = core(n_feat=1, n_tok=2, n_out=1, row=1, rows=3)
    psums = {"psum_from_" + takes: [5, -7]}
    out = m.run([*loaded(p, [1, 1]), weight(p, 100, 0), cr(p, o)], **psums)
    assert out[sends] == u32([105, 93]) and m.counters["wavelets_out"] == 2


def test_engine_adds_from_n_then_from_s_each_saturating():
    p, m = core(n_feat=1, n_tok=1, n_out=1, row=1, rows=3)
    m.run([*loaded(p, [-100]), weight(p, 256, 0), cr(p, 1)],
          psum_from_n=[ACC_MIN + 1], psum_from_s=[ACC_MAX])
    # sat(-25600 + MIN + 1) = MIN; MIN + MAX = -1 -> 0 (the unsaturated sum would give -100)
    assert m.y[0].tolist() == [0] and m.counters["overflow"] == 1


def test_cr_without_its_psums_names_what_is_missing():
    p, m = core(n_feat=1, n_tok=4, n_out=1, row=1, rows=3)
    with pytest.raises(ValueError, match=r"^CR 1 at row 1 needs 4 psum_from_s values, "
                                         r"only 3 left$"):
        m.run([cr(p, 1)], psum_from_n=[1, 2, 3, 4], psum_from_s=[1, 2, 3])


def test_wavelets_in_at_a_read_counts_what_must_have_been_taken():
    p, m = core(n_feat=1, n_tok=2, n_out=2, row=1, rows=2)   # last row, owner of odd o
    late = [raw(3, C.psum_from_n), raw(4, C.psum_from_n)]
    out = m.run([cr(p, 1), read(p, COUNTER_BASE + 4, 1), *late], psum_from_n=[9])
    assert out[C.out] == [2 + 2] and m.counters["wavelets_in"] == 5
    out = m.run([cr(p, 3), read(p, COUNTER_BASE + 4, 1)], psum_from_n=[1])
    assert out[C.out] == [5 + 2 + 1] and m.counters["wavelets_in"] == 8
    assert not m.y.any() and not m.error


# READ ---------------------------------------------------------------------------------------------

def test_read_x_y_and_counters():
    p, m = core(n_feat=2, n_tok=4, n_out=2)
    x = [[1, -1, 0, 32767], [-32768, 5, 6, 7]]
    out = m.run([*loaded(p, x), weight(p, 256, 1), cr(p, 1), read(p, 0, 8),
                 read(p, Y_BASE + 4, 4), read(p, COUNTER_BASE, len(COUNTERS))])
    assert out[C.out][:8] == u32([1, -1, 0, 32767, -32768, 5, 6, 7])
    assert out[C.out][8:12] == u32(x[1])
    busy = 1 + 8 + 4 + 0 + (1 + 2 * 8) + (1 + 2 * 4)      # a CR costs no busy cycle
    assert dict(zip(COUNTERS, out[C.out][12:])) == {
        "busy_cycles": busy, "macs_issued": 4, "macs_skipped_weight": 0, "macs_skipped_act": 0,
        "wavelets_in": 14, "wavelets_out": 12, "stall_cycles": 0, "errors": 0, "overflow": 0}
    assert m.counters["busy_cycles"] == busy + 1 + 2 * 9 and m.counters["wavelets_out"] == 21


def test_read_outside_the_map_reads_zero_and_counts_an_error_per_word():
    p, m = core(n_feat=2, n_tok=4, n_out=2)
    m.run(loaded(p, [[1, 2, 3, 4], [5, 6, 7, 8]]))
    out = m.run([read(p, 7, 2), read(p, Y_BASE + 7, 2), read(p, COUNTER_BASE + 7, 4),
                 read(p, 0xFFFF, 2), read(p, 0, 0)])
    # X[7], X[8]; Y[1][3], Y[2][0]; errors (2 so far), overflow, 0xFF09, 0xFF0A; 0xFFFF, X[0]
    assert out[C.out] == [8, 0, 0, 0, 2, 0, 0, 0, 0, 1]
    assert m.counters["errors"] == 1 + 1 + 2 + 1 and m.error
    assert m.counters["busy_cycles"] == 9 + (5 + 2 * 10)      # five READs of 1 + 2 per word


# Errors and other commands ------------------------------------------------------------------------

def test_slot_out_of_range_is_dropped_even_for_a_zero_weight():
    p, m = core(n_feat=2, n_tok=4, n_out=1)
    m.run([weight(p, 5, 2), weight(p, 0, 0xFFFE)])      # 0xFFFF is the ones slot
    assert m.counters["errors"] == 2 and m.error and m.counters["busy_cycles"] == 2
    assert m.counters["macs_skipped_weight"] == 0 and not m.acc.any()


def test_load_outside_x_is_dropped_and_the_pointer_still_moves():
    p, m = core(n_feat=2, n_tok=4, n_out=1)
    m.run([addr(p, 7), *load(p, [3, 4, 5])])
    assert m.x[1, 3] == 3 and m.ptr == 10 and m.counters["errors"] == 2
    m.run([addr(p, 0xFFFF), *load(p, [6, 7])])
    assert m.ptr == 1 and m.x[0, 0] == 7 and m.counters["errors"] == 3


@pytest.mark.parametrize("op", range(13, 16))       # 9 MASK, 10 TOKENS, 11, 12 CR_ACT, CR_DELTA
def test_unknown_opcodes_are_errors(op):
    p, m = core()
    m.run([raw(op << 28, C.cmd, 1), raw(op << 28 | 5, C.weight, 1)])
    assert m.counters["errors"] == 2 and m.error and m.counters["busy_cycles"] == 2


def test_select_chooses_the_column_whose_core_takes_cmd_wavelets():
    """Column 0 is selected after reset; a SELECT for another column makes the core discard
    ``cmd`` wavelets (free, not counted) until one for its own column; weights always count."""
    p, m = core(n_feat=2, n_tok=2, n_out=1, col=1, cols=3)
    other = CoreParams(n_feat=2, n_tok=2, n_out=1, col=2, cols=3)
    assert m.selected == 0
    m.run([*loaded(p, [9, 9]), select(p, 2), *loaded(other, [8, 8, 8, 8])])
    assert not m.x.any() and m.counters["wavelets_in"] == 0 and m.counters["busy_cycles"] == 0
    m.run([select(p), *loaded(p, [1, 2, 3, 4]), select(p, 7), read(p, 0, 4), weight(p, 2, 1)])
    assert m.x.tolist() == [[1, 2], [3, 4]] and m.selected == 7
    assert m.acc.tolist() == [6, 8] and m.counters["wavelets_in"] == 6
    assert m.counters["busy_cycles"] == 5 + 2 and not m.error
    # a READ's snapshot of wavelets_in counts the wavelets kept before it, not the SELECTs
    out = m.run([select(p, 1), select(p, 1), read(p, COUNTER_BASE + 4, 1), select(p, 0),
                 read(p, 0, 1)])
    assert out[C.out] == [7] and m.counters["wavelets_in"] == 7
    # SELECT on the weight color is not a command: an error, like an unknown opcode
    m.run([raw(int(ControlOp.SELECT.value) << 28 | 1, C.weight, 1)])
    assert m.counters["errors"] == 1 and m.selected == 0


def test_cr_with_a_result_slot_out_of_range_is_dropped():
    p, m = core(n_feat=1, n_tok=2, n_out=2, row=1, rows=2)
    m.run([*loaded(p, [1, 2]), weight(p, 1, 0), cr(p, 5)])   # owner 1, slot 2
    assert m.counters["errors"] == 1 and m.error and m.acc.tolist() == [1, 2]
    out = m.run([cr(p, 4)])                                   # owner 0: no slot check here
    assert out[C.psum_to_n] == [1, 2] and m.counters["errors"] == 1 and not m.acc.any()


def test_foreign_colors_are_dropped_and_switch_commands_are_no_ops():
    p, m = core(n_feat=1, n_tok=2, n_out=1)
    switch = [raw(op.value << 28, color, 1) for op in (ControlOp.NOP, ControlOp.ADVANCE,
                                                       ControlOp.RESET, ControlOp.TEARDOWN)
              for color in (C.cmd, C.weight)]
    m.run([raw(1, 3), raw(2, C.out), *switch, raw(5 << 28 | 1, C.weight, 1), *load(p, [9])])
    assert m.counters["errors"] == 2 and m.counters["wavelets_in"] == 12
    # 2 foreign colors (1 cycle each), 8 switch no-ops, ADDR 1 (on the weight color), 1 LOAD
    assert m.counters["busy_cycles"] == 2 + 8 + 1 + 1 and m.x[0].tolist() == [0, 9]


# Parameters and builders --------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, message", [
    ({"n_feat": 0}, r"n_feat must be an integer in 1\.\.4096, not 0"),
    ({"n_feat": 4097}, r"n_feat must be an integer in 1\.\.4096, not 4097"),
    ({"n_tok": 6}, r"n_tok must be a power of two, not 6"),
    ({"n_tok": 0}, r"n_tok must be a power of two, not 0"),
    ({"n_tok": 8192, "n_feat": 1, "n_out": 1}, r"n_tok must be at most 4096, not 8192"),
    ({"n_out": 4097}, r"n_out must be an integer in 1\.\.4096, not 4097"),
    ({"lanes": 3}, r"lanes must be a power of two dividing n_tok \(8\), not 3"),
    ({"lanes": 16}, r"lanes must be a power of two dividing n_tok \(8\), not 16"),
    ({"fmt": FixedPoint(acc_width=48)}, r"fmt must be a BFloat16, or a FixedPoint with width "
                                        r"<= 16 and acc_width <= 32, not FixedPoint\(width=16, "
                                        r"frac_bits=8, acc_width=48\)"),
    ({"fmt": "fp8"}, r"number format must be one of int16, bf16, not 'fp8'"),
    ({"rows": 0}, r"rows must be a positive integer, not 0"),
    ({"row": 3, "rows": 3}, r"row must be an integer in 0\.\.2, not 3"),
    ({"colors": (8, 9)}, r"colors must be a CoreColors, not \(8, 9\)"),
    ({"n_feat": 4096, "n_tok": 16}, r"n_feat \* n_tok must be at most 32768 \(X below 0x8000\), "
                                    r"not 65536"),
    ({"n_out": 4096}, r"n_out \* n_tok must be at most 32512 \(Y in 0x8000\.\.0xFEFF\), "
                      r"not 32768"),
])
def test_parameters_are_checked(kwargs, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        CoreParams(**kwargs)


def test_colors_are_checked():
    with pytest.raises(ValueError, match=r"^cmd must be an integer in 0\.\.31, not 32$"):
        CoreColors(cmd=32)
    with pytest.raises(ValueError, match=r"^colors must be distinct, not CoreColors\(cmd=8, "
                                         r"weight=8, psum_from_n=10"):
        CoreColors(weight=8)
    assert CoreParams(n_tok=np.int64(4)).n_tok == 4 and CoreParams().tpb == 8


@pytest.mark.parametrize("build, message", [
    (lambda p: weight(p, 40000, 0), r"value must fit in int16 \(-32768\.\.32767\), not 40000"),
    (lambda p: weight(p, 1, 1 << 16), r"slot must be an integer in 0\.\.65535, not 65536"),
    (lambda p: load(p, [1, -40000]), r"values must fit in int16 \(-32768\.\.32767\), not -40000"),
    (lambda p: addr(p, -1), r"address must be an integer in 0\.\.65535, not -1"),
    (lambda p: read(p, 0, 4096), r"length must be an integer in 0\.\.4095, not 4096"),
    (lambda p: cr(p, 1 << 25), r"o must be an integer in 0\.\.33554431, not 33554432"),
    (lambda p: axpy_cycles(p, [True]), r"mask_row must have shape \(8,\), not \(1,\)"),
    (lambda p: axpy_cycles(p, [True] * 8, [1]), r"gate must have shape \(8,\), not \(1,\)"),
    (lambda p: mask(p, 64, 0), r"chunk must be an integer in 0\.\.63, not 64"),
    (lambda p: mask(p, 0, 1 << 16), r"bits must be an integer in 0\.\.65535, not 65536"),
    (lambda p: mask(p, 0, 0, col=64), r"col must be an integer in 0\.\.63, not 64"),
    (lambda p: CoreModel(p).run([1 << 38]), r"wavelets must be 38-bit integers, not 274877906944"),
    (lambda p: CoreModel(p).run([], psum_from_s=[1 << 32]),
     r"psum_from_s values must fit in 32 bits, not 4294967296"),
    (lambda p: CoreModel(None), r"params must be a CoreParams, not None"),
])
def test_builders_and_run_check_their_arguments(build, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        build(CoreParams())


def test_builders_encode_per_the_contract():
    p = CoreParams()
    assert weight(p, -2, 3) == raw(3 << 16 | 0xFFFE, C.weight)
    assert read(p, 0x8001, 5) == raw(ControlOp.READ.value << 28 | 5 << 16 | 0x8001, C.cmd, 1)
    assert cr(p, 7) == raw(ControlOp.CR.value << 28 | 7, C.weight, 1)
    assert addr(p, 9) == raw(ControlOp.ADDR.value << 28 | 9, C.cmd, 1)
    assert load(p, [[-1, 2]]) == [raw(0xFFFF, C.cmd), raw(2, C.cmd)]
    assert mask(p, 5, 0x8001, col=3) == raw(ControlOp.MASK.value << 28 | 3 << 22 | 5 << 16
                                            | 0x8001, C.weight, 1)
    assert mask(p, 1, 2, color=C.cmd) == raw(9 << 28 | 1 << 16 | 2, C.cmd, 1)


# A whole layer ------------------------------------------------------------------------------------

def test_random_layer_matches_plain_numpy():
    rng = np.random.default_rng(11)
    p, m = core(n_feat=16, n_tok=8, n_out=16, lanes=2)
    x = rng.integers(-200, 201, (16, 8)) * (rng.random((16, 8)) > 0.3)
    w = rng.integers(-300, 301, (16, 16)) * (rng.random((16, 16)) > 0.3)
    program = loaded(p, x)
    for o in rng.permutation(16):
        program += [weight(p, int(w[o, f]), int(f)) for f in rng.permutation(16)]
        program.append(cr(p, int(o)))
    m.run(program)
    want = np.round((w @ x) / 256.0).astype(np.int64)   # no saturation: |W @ X| < 2**20
    assert (m.y == want).all()
    nonzero_w, nonzero_x = (w != 0).sum(axis=0), (x != 0).sum(axis=1)
    assert m.counters["macs_issued"] == int((nonzero_w * nonzero_x).sum())
    assert m.counters["macs_skipped_weight"] == 8 * int((w == 0).sum())
    assert m.counters["macs_issued"] + m.counters["macs_skipped_weight"] \
        + m.counters["macs_skipped_act"] == 16 * 16 * 8
    assert m.counters["errors"] == m.counters["overflow"] == 0 and not m.acc.any()


def test_raw_carriage_return_sends_the_owners_totals_on_out():
    p, m = core(n_feat=1, n_tok=2, n_out=1, row=1, rows=2)
    out = m.run([*loaded(p, [30000, -30000]), weight(p, 30000, 0), cr(p, 3, raw=True)],
                psum_from_n=[5, -5])
    # owner row 1 (3 % 2), slot 1 would be outside Y: no error for a raw CR
    assert out[C.out] == u32([900000005, -900000005]) and not m.error and not m.y.any()
    assert m.counters["overflow"] == 0


# Carriage return flags (isa.CrArg) ----------------------------------------------------------------

def test_builders_encode_the_carriage_return_flags():
    p = CoreParams()
    base = ControlOp.CR.value << 28 | 7
    assert cr(p, 7, quiet_n=True) == raw(base | 1 << 25, C.weight, 1)
    assert cr(p, 7, quiet_s=True) == raw(base | 1 << 26, C.weight, 1)
    assert cr(p, 7, skip=True) == raw(base | 1 << 27, C.weight, 1)
    assert cr(p, isa.MAX_O, raw=True, quiet_n=1, quiet_s=1, skip=1) == raw(
        ControlOp.CR_OUT.value << 28 | (1 << 28) - 1, C.weight, 1)
    assert isa.CR_ARG.unpack(isa.cr_data(5, quiet_s=True) & isa.MAX_ARG) == {
        "o": 5, "quiet_n": 0, "quiet_s": 1, "skip": 0}


@pytest.mark.parametrize("quiet_n, quiet_s", [(True, False), (False, True), (True, True)])
def test_quiet_sides_take_no_psums(quiet_n, quiet_s):
    """Row 1 of 3 owns output 4: without flags it takes both sides' psums; a quiet side
    gives none (and none are left unused)."""
    p, m = core(n_feat=1, n_tok=2, n_out=2, row=1, rows=3)
    psums = {}
    if not quiet_n:
        psums["psum_from_n"] = [256, 512]
    if not quiet_s:
        psums["psum_from_s"] = [1024, -2048]
    m.run([*loaded(p, [1, 2]), weight(p, 256, 0), cr(p, 4, quiet_n=quiet_n, quiet_s=quiet_s)],
          **psums)
    want = np.array([256, 512]) + sum(np.array(v) for v in psums.values())
    assert m.y[1].tolist() == (want // 256).tolist()
    assert not any(m.pending_psums.values())


@pytest.mark.parametrize("row, raw_cr", [(0, False), (1, False), (1, True), (2, False)])
def test_skip_hands_nothing_over_and_resets_the_gate(row, raw_cr):
    """A CR with ``skip`` sends nothing, takes no psums, writes no ``Y``, costs no busy cycle
    and resets the gate; the accumulators carry into the next output."""
    p, m = core(n_feat=1, n_tok=2, n_out=2, row=row, rows=3, lanes=2)
    out = m.run([*loaded(p, [1, 2]), weight(p, 256, 0), mask(p, 0, 0b01),
                 cr(p, 4, raw=raw_cr, skip=True)])
    assert all(v == [] for v in out.values()) and not m.y.any() and not m.error
    assert m.acc.tolist() == [256, 512] and m.gate.all()
    assert m.counters["busy_cycles"] == 3 + 1 + 1 and m.counters["wavelets_out"] == 0
    out = m.run([weight(p, 256, 0), cr(p, 3 + row, raw=True, quiet_n=True, quiet_s=True)])
    assert out[C.out] == [512, 1024] and not m.acc.any()


def test_a_dropped_carriage_return_stays_dropped_with_skip():
    """The result-slot check comes first: this row's CR outside ``Y`` is an error, flags or
    not (the gate stays, a busy cycle); a CR_OUT there with skip is no error."""
    p, m = core(n_feat=1, n_tok=2, n_out=1, row=1, rows=2)
    m.run([*loaded(p, [1, 2]), mask(p, 0, 0), cr(p, 3, skip=True)])
    assert m.counters["errors"] == 1 and not m.gate.any()
    assert m.counters["busy_cycles"] == 3 + 1 + 1
    m.run([cr(p, 3, raw=True, skip=True)])
    assert m.counters["errors"] == 1 and m.gate.all()


# CR_ACT and the ones slot -------------------------------------------------------------------------

def test_cr_act_writes_relu_of_the_result_into_x_and_sends_it():
    """Row 1 of 2 owns output 3 (slot 1): ``relu(requantise(acc + psum))`` of the gated tokens
    (0, 1, 3) goes into ``X[1]`` with their nonzero bits and out, as a READ of them sends
    them; token 2 keeps its word; a saturated result sets the overflow flag; ``Y`` stays."""
    p, m = core(n_feat=2, n_tok=4, n_out=1, row=1, rows=2, lanes=2)
    out = m.run([*loaded(p, [[256, -512, 7, 30000], [1, 2, 3, 4]]), weight(p, 256, 0),
                 mask(p, 0, 0b1011), cr(p, 3, act=True)],
                psum_from_n=[128, 0, 32767 * 256])
    # sums: 65536 + 128 (256.5: rounded half to even, 256), -131072 (-512: ReLU, 0),
    # 7680000 + 8388352 (past 32767 * 256: saturates)
    assert out[C.out] == [256, 0, 32767] and m.counters["wavelets_out"] == 3
    assert m.x[1].tolist() == [256, 0, 3, 32767]
    assert m.mask[1].tolist() == [True, False, True, True]
    assert m.counters["overflow"] == 1 and not m.error and not m.y.any()
    assert m.run([read(p, 4, 4)])[C.out] == [256, 0, 3, 32767]


def test_cr_act_in_bf16_clears_every_pattern_with_its_sign_bit_set():
    """bf16: 1.5 and 2.0 stay, -2.0 becomes ``+0``; the zero results' mask bits clear. The
    ReLU clears ``-0`` and the negative NaNs too, and keeps a positive NaN."""
    from wse.fabric import numerics
    from wse.rtl.numfmt import BFloat16

    p, m = core(n_feat=2, n_tok=4, n_out=1, fmt=BFloat16())
    x = [0x3FC0, 0xC000, 0, 0x4000]                        # 1.5, -2.0, 0, 2.0
    out = m.run([*loaded(p, [x, [0x3F80] * 4]), weight(p, 0x3F80, 0), cr(p, 1, act=True)])
    assert out[C.out] == [0x3FC0, 0, 0, 0x4000]
    assert m.x[1].tolist() == [0x3FC0, 0, 0, 0x4000]
    assert m.mask[1].tolist() == [True, False, False, True]
    assert numerics.relu(p.fmt, [0x8000, 0xFFC0, 0x7FC0]).tolist() == [0, 0, 0x7FC0]


@pytest.mark.parametrize("kind", ["act", "delta"])
def test_cr_act_and_cr_delta_slots_are_checked_against_x_on_the_owner_row_alone(kind):
    """``n_feat`` 2, ``n_out`` 4: this row's CR_ACT (or CR_DELTA) of slot 2 is an error
    (dropped: no psums taken, the accumulators stay), a CR of slot 2 is not; on row 0 of 2 a
    CR_ACT of row 1's slot 5 is a CR that sends its psums south."""
    p, m = core(n_feat=2, n_tok=2, n_out=4)
    m.run([*loaded(p, [[1, 2], [3, 4]]), weight(p, 256, 0), cr(p, 2, **{kind: True})])
    assert m.counters["errors"] == 1 and m.acc.tolist() == [256, 512]
    m.run([cr(p, 2)])
    assert m.counters["errors"] == 1 and m.y[2].tolist() == [1, 2]
    p, m = core(n_feat=2, n_tok=2, n_out=4, rows=2)
    out = m.run([*loaded(p, [[1, 2], [3, 4]]), weight(p, 256, 1), cr(p, 11, **{kind: True})])
    assert out[C.psum_to_s] == [768, 1024] and not m.error and out[C.out] == []


@pytest.mark.parametrize("fmt, one", [(FixedPoint(), 256), (FixedPoint(frac_bits=15), 32767),
                                      ("bf16", 0x3F80)])
def test_the_ones_slot_is_a_bias_on_every_gated_token(fmt, one):
    """An AXPY of slot 0xFFFF: ``ACC[t] += w * one`` on every gated token, zero activations
    or none loaded at all; it costs the busiest bank's gated tokens and counts them issued
    (int16 ``one`` is ``1 << frac_bits``, the largest operand when that does not fit)."""
    from wse.fabric import numerics

    p, m = core(n_feat=1, n_tok=8, n_out=1, lanes=2, fmt=fmt)
    assert numerics.one(p.fmt) == one
    w = 0x4040 if p.fmt.is_float else 3                    # 3.0 in bf16
    m.run([mask(p, 0, 0b1110_0110), weight(p, w, isa.ONES_SLOT)])
    assert m.counters["busy_cycles"] == 1 + 3 and m.counters["macs_issued"] == 5
    assert m.counters["macs_skipped_act"] == 3 and not m.error
    gated = [bool(0b1110_0110 >> t & 1) for t in range(8)]
    if p.fmt.is_float:
        want = numerics.from_float32(np.where(gated, np.float32(3.0), np.float32(0)))
    else:
        want = np.where(gated, 3 * one, 0)
    assert m.acc.tolist() == list(want)


# CR_DELTA -----------------------------------------------------------------------------------------

def test_cr_delta_writes_every_active_token_kept_by_the_gate():
    """Row 1 of 2 owns output 3 (slot 1): the engine visits every active token, the MASK's
    (0, 1, 3) and token 2 it gated off alike, taking a psum for each, and writes
    ``requantise(acc + psum)`` into ``X[1]`` and out where the gate is set, 0 where it is
    clear, whatever the word it replaces (no ReLU: a negative result is kept); a saturated
    result sets the overflow flag even where its word is zeroed; ``Y`` stays."""
    p, m = core(n_feat=2, n_tok=4, n_out=1, row=1, rows=2, lanes=2)
    cmds = [*loaded(p, [[256, -512, 7, 30000], [1, 0, 3, 0]]), weight(p, 256, 0),
            mask(p, 0, 0b1011), cr(p, 3, delta=True)]
    with pytest.raises(ValueError, match="needs 4 psum_from_n values, only 3 left"):
        core(n_feat=2, n_tok=4, n_out=1, row=1, rows=2, lanes=2)[1].run(
            cmds, psum_from_n=[128, 0, 2**23])
    out = m.run(cmds, psum_from_n=[128, 0, 2**23, 256])
    # results 256 (256.5, half to even), -512, 32767 (saturated: token 2's ACC is 0, the
    # AXPY skipped it), 30001; X[1] was 1, 0, 3, 0
    assert out[C.out] == u32([256, -512, 0, 30001]) and m.x[1].tolist() == [256, -512, 0, 30001]
    assert m.mask[1].tolist() == [True, True, False, True]
    assert m.counters["overflow"] == 1 and not m.error and not m.y.any()
    assert m.pending_psums[C.psum_from_n] == 0 and m.gate.all()
    # nothing saturates: no overflow; a kept 0 clears its bit, a zeroed word over a nonzero one
    p, m = core(n_feat=2, n_tok=4, n_out=1, row=1, rows=2, lanes=2)
    out = m.run([*loaded(p, [[256, -512, 0, 7], [0, 5, 3, 8]]), weight(p, 256, 0),
                 mask(p, 0, 0b0111), cr(p, 3, delta=True)], psum_from_n=[0, 0, 0, 9])
    assert out[C.out] == u32([256, -512, 0, 0]) and m.x[1].tolist() == [256, -512, 0, 0]
    assert m.mask[1].tolist() == [True, True, False, False]
    assert m.counters["overflow"] == 0


def test_cr_delta_visits_the_active_tokens_and_other_rows_their_gate():
    """Three active tokens of four, a MASK of tokens 1 and 3 (3 inactive): the owner's engine
    visits tokens 0, 1, 2 (three psums), writes the result at 1 and 0 at 0 and 2, and leaves
    token 3's word (gated, inactive: not visited); on row 0 of 2 the same CR_DELTA is a CR
    whose engine visits its gate (tokens 1 and 3: their sums go south)."""
    p, m = core(n_feat=2, n_tok=4, n_out=1, row=1, rows=2, lanes=2)
    stream = [*loaded(p, [[4, 5, 6, 7], [1, 2, 3, 9]]), tokens(p, 3), mask(p, 0, 0b1010),
              weight(p, 256, 0), cr(p, 3, delta=True)]
    out = m.run(stream, psum_from_n=[256, 512, 768])
    assert out[C.out] == [0, 7, 0] and m.x[1].tolist() == [0, 7, 0, 9]
    assert m.pending_psums[C.psum_from_n] == 0 and m.gate.tolist() == [True] * 3 + [False]
    p, m = core(n_feat=2, n_tok=4, n_out=1, row=0, rows=2, lanes=2)
    out = m.run(stream)
    assert out[C.psum_to_s] == [5 * 256, 7 * 256] and out[C.out] == []
    assert m.x[1].tolist() == [1, 2, 3, 9]
