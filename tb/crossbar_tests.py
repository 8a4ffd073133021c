"""cocotb test of a crossbar whose outputs end in the ECP5's ``PFUMX`` primitive (run by
tests/test_router_parts.py on Icarus with Yosys's ECP5 cell models): every output, for every
one-hot select and for a zero one, against what the crossbar is specified to give."""

import random

import cocotb
from cocotb.triggers import Timer

from .router_tb import load_params


def _rows(word, width, count):
    return [(word >> (k * width)) & ((1 << width) - 1) for k in range(count)]


@cocotb.test()
async def pfumx_outputs_follow_their_selects(dut):
    """``WSE_PARAMS``: ``width``, ``n_in``, ``n_out``, ``pairs``, ``cycles``, ``seed``. Each
    output copies the input its one-hot select names, ``a`` (its first input) when the select
    is zero; a set bit of a missing pair is ignored by the AND-OR outputs alone, so it is not
    driven here."""
    p = load_params()
    width, n_in, n_out = p["width"], p["n_in"], p["n_out"]
    ins = [[i for i in range(n_in) if [i, o] in p["pairs"]] for o in range(n_out)]
    rng = random.Random(p["seed"])
    checked = 0
    for _ in range(p["cycles"]):
        inputs = [rng.getrandbits(width) for _ in range(n_in)]
        choices = [rng.choice([None, *present]) for present in ins]
        select = sum((0 if c is None else 1 << c) << (o * n_in) for o, c in enumerate(choices))
        dut.inputs.value = sum(v << (k * width) for k, v in enumerate(inputs))
        dut.select.value = select
        await Timer(1, "ns")
        got = _rows(int(dut.outputs.value), width, n_out)
        for o, (choice, present) in enumerate(zip(choices, ins)):
            if not present:
                continue
            if choice is None:      # four inputs: the first one; otherwise AND-OR's zero
                want = inputs[present[0]] if len(present) == 4 else 0
            else:
                want = inputs[choice]
            assert got[o] == want, (f"output {o}, select {choice}: {got[o]:#x}, "
                                    f"want {want:#x}")
            checked += 1
    cocotb.log.info(f"crossbar with PFUMX outputs: {checked} outputs over {p['cycles']} input "
                  f"sets on Yosys's PFUMX model, bit-exact")
