"""Every formal check of the project, and the mutations that must fail them.

A check is a spec, a mode and a depth: ``prove`` (k-induction: proven for every reachable state),
``bmc`` (every state reachable within ``depth`` cycles of reset) or ``cover`` (every ``Cover``
reached within ``depth``). A mutation is a seeded bug, a text replacement in one RTL module
applied to a fresh copy of it, and the check it must make fail (status ``FAIL``: a
counterexample, not a timeout).
"""

from dataclasses import dataclass, field

from wse.rtl import allocator, arbiter, peek_fifo, route_state, router, router_input

from .arbiter import AllocatorSpec, RoundRobinSpec
from .fifo import FIFOSpec
from .route_state import RouteStateSpec
from .router import RouterSpec
from .router_input import RouterInputSpec
from .router_input_reconfig import RouterInputReconfigSpec
from .router_reconfig import RouterReconfigSpec
from .sby import mutant

__all__ = ["Check", "Mutation", "CHECKS", "COVERS", "MUTATIONS", "module_for", "mutation_run"]

# The depths of the bounded checks (docs/formal.md says why they cover what they cover).
INPUT_DEPTH = 7
ROUTER_DEPTH = 8
PROGRESS_BOUND = 4
ROUTE_STATE_DEPTH = 8
RECONFIG_INPUT_DEPTH = 10
RECONFIG_PROGRESS_BOUND = 1
RECONFIG_ROUTER_DEPTH = 7


@dataclass(frozen=True)
class Check:
    name: str
    what: str
    build: object          # module -> spec (the module: the real one or a mutant)
    module: str            # the wse.rtl module the spec takes
    mode: str
    depth: int
    options: dict = field(default_factory=dict)


def _fifo(kind, depth):
    return lambda module, **kw: FIFOSpec(module, kind, depth, **kw)


REAL = {"peek_fifo": peek_fifo, "arbiter": arbiter, "allocator": allocator,
        "router_input": router_input, "router": router, "route_state": route_state}
FLAT = {"flatten_memories": True}

CHECKS = [
    *(Check(f"lut_fifo_d{d}", f"LutFIFO depth {d}: flags, two tracked entries in order",
            _fifo("lut", d), "peek_fifo", "prove", d + 3) for d in (2, 3, 4)),
    *(Check(f"peek_fifo_d{d}", f"PeekFIFO depth {d}: flags, fill, head/next/held, take2",
            _fifo("peek", d), "peek_fifo", "prove", d + 3) for d in (2, 3, 4)),
    Check("round_robin_hold", "RoundRobin(5, hold): grants requesters; fair within 4 others",
          lambda mod, **kw: RoundRobinSpec(mod, 5, hold=True, **kw), "arbiter", "prove", 4),
    Check("round_robin_nohold", "RoundRobin(5, hold=False): fair within 4 cycles",
          lambda mod, **kw: RoundRobinSpec(mod, 5, hold=False, **kw), "arbiter", "prove", 4),
    Check("allocator", "SwitchAllocator(5, no U-turns): one-hot, work-conserving, fair",
          lambda mod, **kw: AllocatorSpec(mod, 5, u_turns=False, **kw), "allocator", "prove",
          4),
    Check("allocator_uturns", "SwitchAllocator(5, U-turns): one-hot, work-conserving, fair",
          lambda mod, **kw: AllocatorSpec(mod, 5, u_turns=True, **kw), "allocator", "prove",
          4),
    Check("router_input", "RouterInput (2 queues x 2): drops, tracked pair unmodified, "
          "routed, once, in order, not lost", lambda mod: RouterInputSpec(mod), "router_input",
          "bmc", INPUT_DEPTH, {"flatten_memories": True}),
    Check("router_input_progress", f"RouterInput, outputs granting: every copy out within "
          f"{PROGRESS_BOUND} cycles",
          lambda mod: RouterInputSpec(mod, ready=True, bound=PROGRESS_BOUND), "router_input",
          "bmc", INPUT_DEPTH, {"flatten_memories": True}),
    Check("router_drops", "Router (5 ports, 2 colors, any routes): drop counter exact, "
          "saturating; error", lambda mod: RouterSpec(mod, checks=("drops",)), "router",
          "bmc", ROUTER_DEPTH, {"flatten_memories": True}),
    Check("route_state", "RouteState (2 colors, strapped): walk, one update a cycle, every "
          "lookup the model's route (writes, ADVANCE wrapping, RESET, TEARDOWN)",
          lambda mod: RouteStateSpec(mod), "route_state", "bmc", ROUTE_STATE_DEPTH, FLAT),
    Check("router_input_reconfig", "RouterInput, routes changed any time, configuration and "
          "switch commands: drops, updates, tracked pair on the route of its moment",
          lambda mod: RouterInputReconfigSpec(mod), "router_input", "bmc",
          RECONFIG_INPUT_DEPTH, FLAT),
    Check("router_input_reconfig_progress", f"RouterInput, routes changed any time, outputs "
          f"granting: every copy out within {RECONFIG_PROGRESS_BOUND} cycle",
          lambda mod: RouterInputReconfigSpec(mod, ready=True, bound=RECONFIG_PROGRESS_BOUND),
          "router_input", "bmc", RECONFIG_INPUT_DEPTH, FLAT),
    Check("router_reconfig", "Router end to end, configuration and switch commands mid-traffic: "
          "tracked pair, drop counter, against a reference route state",
          lambda mod: RouterReconfigSpec(mod), "router", "bmc", RECONFIG_ROUTER_DEPTH, FLAT),
]

COVERS = [
    Check("cover_lut_fifo_d3", "LutFIFO: full, read and write at once, both tracked out",
          _fifo("lut", 3), "peek_fifo", "cover", 10),
    Check("cover_peek_fifo_d3", "PeekFIFO: full, both tracked taken at once",
          _fifo("peek", 3), "peek_fifo", "cover", 10),
    Check("cover_round_robin", "RoundRobin: a requester served after 4 others",
          lambda mod: RoundRobinSpec(mod, 5, hold=True), "arbiter", "cover", 8),
    Check("cover_allocator", "SwitchAllocator: an input served after 4 others",
          lambda mod: AllocatorSpec(mod, 5, u_turns=True), "allocator", "cover", 8),
    Check("cover_router_input", "RouterInput: multicast pair out in order, a tracked drop, "
          "both queued", lambda mod: RouterInputSpec(mod), "router_input", "cover",
          INPUT_DEPTH, {"flatten_memories": True}),
    Check("cover_router", "Router: tracked multicast pair out in order, drops counted, "
          "the counter saturated",
          lambda mod: RouterSpec(mod, checks=("drops",)), "router", "cover", ROUTER_DEPTH,
          {"flatten_memories": True}),
    Check("cover_route_state", "RouteState: ADVANCE wrapped after a written last position; "
          "a torn color reopened with a rewritten position 0",
          lambda mod: RouteStateSpec(mod), "route_state", "cover", ROUTE_STATE_DEPTH, FLAT),
    Check("cover_router_input_reconfig", "RouterInput: a torn wavelet reopened and out on its "
          "new route; a torn head dropped and the next one out; a wavelet out on its old route "
          "after its color was rerouted; an update between the tracked pair",
          lambda mod: RouterInputReconfigSpec(mod), "router_input", "cover", 12, FLAT),
    Check("cover_router_reconfig", "Router: t1 out after its color was rewritten while it was "
          "queued; out after its color was torn down while queued; t1 taken torn, waiting; "
          "t1 dropped and counted",
          lambda mod: RouterReconfigSpec(mod), "router", "cover", RECONFIG_ROUTER_DEPTH, FLAT),
]


@dataclass(frozen=True)
class Mutation:
    """Run as BMC (a counterexample, never an induction that merely fails) of ``depth``
    (the check's own for a bounded check, else ``MUTATION_DEPTH``) without the spec's helper
    invariants, so that what fails is a property itself."""
    name: str
    what: str
    module: str
    replacements: dict
    check: str             # the check it must fail


MUTATION_DEPTH = 10


def mutation_run(check, mutation):
    """``(spec, mode, depth)`` for running ``mutation`` against ``check``."""
    module = module_for(check, mutation)
    if check.mode == "prove":
        return check.build(module, invariants=False), "bmc", MUTATION_DEPTH
    return check.build(module), check.mode, check.depth


MUTATIONS = [
    Mutation("lut_write_when_full", "LutFIFO writes its memory even when full",
             "peek_fifo", {"write_port.en.eq(written)": "write_port.en.eq(self.w.valid)"},
             "lut_fifo_d3"),
    Mutation("lut_empty_flag", "LutFIFO: any read empties it",
             "peek_fifo", {"nonempty.eq(nonempty & ~(taken & (rd_next == wr)))":
                           "nonempty.eq(nonempty & ~taken)"}, "lut_fifo_d3"),
    Mutation("peek_next_off_by_one", "PeekFIFO shows the third entry as `next`",
             "peek_fifo", {"next_port.addr.eq(after(rd, 1))": "next_port.addr.eq(after(rd, 2))"},
             "peek_fifo_d3"),
    Mutation("peek_take2_unchecked", "PeekFIFO takes two with only one there",
             "peek_fifo", {"Mux(r.take2 & r.next_valid, 2,": "Mux(r.take2, 2,"},
             "peek_fifo_d3"),
    Mutation("round_robin_fixed", "RoundRobin: fixed priority, input 0 first",
             "arbiter", {"for index in reversed([(start + 1 + k) % n for k in range(n)]):":
                         "for index in reversed(range(n)):"}, "round_robin_hold"),
    Mutation("allocator_fixed", "SwitchAllocator always starts from input 0",
             "allocator", {"after.eq(~((grant << 1) - 1) & ((1 << n) - 1))":
                           "after.eq((1 << n) - 1)"}, "allocator"),
    Mutation("input_drop_uncounted", "RouterInput does not count an arriving drop",
             "router_input", {"self.drops.eq((self.i.valid & take & (drop | bad_cfg)) + h_drop)":
                              "self.drops.eq(h_drop)"}, "router_input"),
    Mutation("input_read_pointer_stuck", "RouterInput's read pointer never advances",
             "router_input", {"m.d.comb += rd_d[q].eq(Mux(rd[q] == D - 1, 0, rd[q] + 1))":
                              "m.d.comb += rd_d[q].eq(rd[q])"}, "router_input"),
    Mutation("input_pop_first_copy", "RouterInput pops a multicast after its first copy",
             "router_input", {"m.d.comb += pop.eq(present & (left == 0))":
                              "m.d.comb += pop.eq(present & (self.served != 0))"},
             "router_input"),
    Mutation("input_hops_always", "RouterInput decrements `hops` in every wavelet's data",
             "router_input", {"hops.eq(cfg.hops - is_cfg)": "hops.eq(cfg.hops - 1)"},
             "router_input"),
    Mutation("input_ctrl_flipped", "RouterInput offers its head with the control bit flipped",
             "router_input", {"self.offer.eq(head.wavelet),":
                              "self.offer.eq(head.wavelet.as_value() ^ (1 << 37)),"},
             "router_input"),
    Mutation("input_tag_slot0", "RouterInput reads the head's `tx` from slot 0, whatever the "
             "read pointer", "router_input",
             {"head.tag.tx.eq(Array(t.tx for t in slot_tags)[Array(rd)[cand]])":
              "head.tag.tx.eq(slot_tags[0].tx)"}, "router_input"),
    Mutation("input_no_rotation", "RouterInput's candidate never leaves a blocked queue",
             "router_input", {"m.d.comb += cand_d.eq((c + k) % Q)": "pass"},
             "router_input_progress"),
    Mutation("router_counter_wraps", "Router's drop counter wraps instead of saturating",
             "router", {"self.drops.eq(Mux(total > limit, limit, total))":
                        "self.drops.eq(total)"}, "router_drops"),
    Mutation("router_input_drop_uncounted", "A router whose inputs do not count drops",
             "router_input", {"self.drops.eq((self.i.valid & take & (drop | bad_cfg)) + h_drop)":
                              "self.drops.eq(h_drop)"}, "router_drops"),
    Mutation("input_torn_not_flagged", "RouterInput queues a wavelet of a torn-down color "
             "unflagged", "router_input", {"entry.tag.torn.eq(torn)": "entry.tag.torn.eq(0)"},
             "router_input_reconfig"),
    Mutation("input_resume_arrival_route", "RouterInput resumes a torn head on the route it "
             "arrived with, not the one looked up again", "router_input",
             {"owed_next = Mux(resumed, again.tx, left)":
              "owed_next = Mux(resumed, head.tag.tx, left)"}, "router_input_reconfig"),
    Mutation("input_head_drop_uncounted", "RouterInput does not count a torn head dropped on "
             "reopening", "router_input",
             {"self.drops.eq((self.i.valid & take & (drop | bad_cfg)) + h_drop)":
              "self.drops.eq(self.i.valid & take & (drop | bad_cfg))"}, "router_input_reconfig"),
    Mutation("input_switch_while_torn", "RouterInput applies a switch command of a torn-down "
             "color", "router_input", {"wants_update = ~torn & ~drop & (":
                                       "wants_update = ~drop & ("}, "router_input_reconfig"),
    Mutation("input_no_lock", "RouterInput takes the next wavelet while its update is applied",
             "router_input", {"lock.eq(slot_valid | applying)": "lock.eq(slot_valid)"},
             "router_input_reconfig"),
    Mutation("input_update_color", "RouterInput hands a configuration's update its own color, "
             "not its target", "router_input",
             {"slot.color.eq(Mux(is_cfg, cfg.target, w.color))": "slot.color.eq(w.color)"},
             "router_input_reconfig"),
    Mutation("input_head_waits_update", "RouterInput offers no head while its update is "
             "pending", "router_input", {"self.request.eq(Mux(present, tx, 0))":
                                         "self.request.eq(Mux(present & ~lock, tx, 0))"},
             "router_input_reconfig_progress"),
    Mutation("route_advance_no_wrap", "RouteState: ADVANCE does not wrap after the last "
             "position", "route_state",
             {"new.current.eq(Mux(was.current >= was.last, 0, was.current + 1))":
              "new.current.eq(was.current + 1)"}, "route_state"),
    Mutation("route_reset_keeps_torn", "RouteState: RESET does not reopen a torn-down color",
             "route_state", {"m.d.comb += [new.current.eq(0), new.torn.eq(0)]":
                             "m.d.comb += new.current.eq(0)"}, "route_state"),
    Mutation("route_write_not_published", "RouteState: a write to the current position is not "
             "published to the inputs' copies", "route_state",
             {"Mux(walking | (write & (stage.position == new_pos)), written,":
              "Mux(walking, written,"}, "route_state"),
    Mutation("router_teardown_ignored", "A router whose route state ignores TEARDOWN",
             "route_state", {"m.d.comb += new.torn.eq(1)": "pass"}, "router_reconfig"),
    Mutation("router_write_not_published", "A router whose route state does not publish a "
             "write to the current position", "route_state",
             {"Mux(walking | (write & (stage.position == new_pos)), written,":
              "Mux(walking, written,"}, "router_reconfig"),
]


def module_for(check, mutation=None):
    """The module ``check``'s spec takes: the real one, or with ``mutation`` seeded (a mutant
    of a part is put into a fresh copy of the router when the check is the router's)."""
    if mutation is None:
        return REAL[check.module]
    mod = mutant(mutation.module, mutation.replacements)
    if check.module == mutation.module:
        return mod
    if check.module == "router" and mutation.module == "router_input":
        return mutant("router", {}, RouterInput=mod.RouterInput)
    if check.module == "router" and mutation.module == "route_state":
        return mutant("router", {}, RouteState=mod.RouteState)
    raise ValueError(f"mutation {mutation.name} of {mutation.module} cannot reach "
                     f"check {check.name} of {check.module}")
