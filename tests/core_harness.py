"""Run :class:`rtl.core.Core` in Amaranth's simulator on wavelet lists, as a rotating ramp would.

Shared by the core's unit tests: returns what the core sent per color and its counters (read
back through a READ of the counter block, as the host would).
"""

from amaranth.sim import Simulator

from wse.fabric import pe_model
from wse.rtl.core import Core
from wse.rtl.core_params import COUNTER_BASE, COUNTERS
from wse.rtl.isa import WAVELET, core_strap_value


def run_core(params, commands, *psum_lists, cycles=20000, ready=lambda cycle: True, **core_kwargs):
    """Feed ``commands`` and psum wavelet lists to a core; READ the counters at the end.

    Each list stands for one router queue. Each cycle the ramp offers the head of one pending
    list, moving to the next list when the core does not take it. With ``straps=True`` the
    core's straps are tied to ``params`` (as a mesh ties them). Returns
    ``({color: [data words]}, counters, cycles_used)``.
    """
    core = Core(params, **core_kwargs)
    commands = list(commands) + [pe_model.read(params, COUNTER_BASE, len(COUNTERS))]
    sent = {}
    used = []

    async def bench(ctx):
        if core.straps:
            ctx.set(core.strap.as_value(), core_strap_value(params))
        lists = [list(commands)] + [list(psums) for psums in psum_lists]
        turn = 0
        idle = 0
        for cycle in range(cycles):
            pending = [k for k in range(len(lists)) if lists[k]]
            offer = None
            if pending:
                turn = turn if lists[turn] else pending[0]
                offer = lists[turn][0]
                ctx.set(core.i.valid, 1)
                ctx.set(core.i.payload.as_value(), offer)
            else:
                ctx.set(core.i.valid, 0)
            ctx.set(core.o.ready, ready(cycle))
            took = offer is not None and ctx.get(core.i.ready)
            if ctx.get(core.o.valid) and ctx.get(core.o.ready):
                word = ctx.get(core.o.payload.as_value())
                fields = WAVELET.unpack(word)
                sent.setdefault(int(fields["color"]), []).append(int(fields["data"]))
            await ctx.tick()
            if took:
                lists[turn].pop(0)
            elif pending:      # not taken: offer the next list that has something
                later = [k for k in pending if k > turn] or pending
                turn = later[0]
            replies = len(sent.get(params.colors.out, []))
            if not any(lists) and replies >= expected_out[0]:
                idle += 1
                if idle > 8:
                    used.append(cycle)
                    return
        raise AssertionError(f"core did not finish in {cycles} cycles")

    # the ``out`` words to wait for (READs, and a raw CR's totals of the tokens its gate lets
    # through): what the golden model sends for the same wavelets
    psum_words = [w for psums in psum_lists for w in psums]
    expected_out = [len(pe_model.CoreModel(params).run(commands + psum_words)[params.colors.out])]
    sim = Simulator(core)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    replies = sent.get(params.colors.out, [])
    counters = dict(zip(COUNTERS, replies[-len(COUNTERS):]))
    sent[params.colors.out] = replies[:-len(COUNTERS)]
    return sent, counters, used[0]


async def drain_tokens(ctx, dut, tokens, lanes=2):
    """Drive an :class:`~rtl.core_acc.AccBuffers` drain port as the psum engine does: read
    each of ``tokens`` tokens (bank ``t % lanes``, index ``t // lanes``), then add it back,
    ``done`` on the last; return the words read, in token order."""
    got = []
    for t in range(tokens):
        ctx.set(dut.drain.read, 1)
        ctx.set(dut.drain.read_bank, t % lanes)
        ctx.set(dut.drain.read_index, t // lanes)
        await ctx.tick()
        ctx.set(dut.drain.read, 0)
        ctx.set(dut.drain.add_bank, t % lanes)
        ctx.set(dut.drain.done, t == tokens - 1)
        got.append(ctx.get(dut.drain.data))
        await ctx.tick()
        ctx.set(dut.drain.done, 0)
    return got
