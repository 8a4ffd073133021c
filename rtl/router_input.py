"""One input port of the router: the route lookup on arrival, the queues, and the one head it
offers the switch allocator each cycle."""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .route_state import PortRoute, RouteLookup, RouteUpdate
from .validate import integer
from .wavelet import (
    MAX_COLORS,
    ConfigOp,
    ConfigPayload,
    ControlOp,
    ControlPayload,
    Direction,
    Wavelet,
)

__all__ = ["QueueEntry", "QueueTag", "RouterInput"]

_SWITCH_OPS = (ControlOp.ADVANCE, ControlOp.RESET, ControlOp.TEARDOWN)


class QueueTag(data.Struct):
    """What a queued wavelet's route gave it on arrival."""
    tx:   5         # output ports still to copy to when it reaches the head
    torn: 1         # its color was torn down on arrival: look the route up again at the head


class QueueEntry(data.Struct):
    """A queued wavelet with its tag (with 2-deep queues kept in two places: the wavelets in
    one LUT RAM, the tags in one per queue slot)."""
    wavelet: Wavelet
    tag:     QueueTag


class RouterInput(wiring.Component):
    """Arrival, queues and head of one input port.

    **Arrival.** The wavelet on ``i`` is looked up (``arrive``, or the configuration route
    ``cfg_route`` for the configuration color) in the cycle it is offered, and then:

    - dropped (taken and counted in ``drops``) when its port is not in the route's ``rx`` or
      the route has no output; a configuration for this router (``hops == 0``) naming a color
      outside the table or an unknown operation is dropped likewise;
    - a configuration for this router, or a switch command (control ``ADVANCE``, ``RESET``,
      ``TEARDOWN``), goes to the route state's update engine (``update``); a switch command is
      also queued, with the route it arrived on. The input then waits one cycle, so the next
      wavelet's lookup sees the change;
    - otherwise it is written to queue ``queue`` (given by the router from its color) with its
      ``tx`` mask; a configuration to forward leaves with ``hops - 1``. A wavelet of a torn-down
      color is queued flagged ``torn``.

    ``i.ready`` is high when the input is not waiting for an update of its own and the
    wavelet's queue has room, or the wavelet is a configuration for this router (applied or
    dropped without a queue). A wavelet to drop waits for room like any other: ``i.ready``
    follows from the color (its queue), a configuration's ``hops`` and flip-flops, never from
    the route lookup, so the output that offers the wavelet (a neighbouring tile's) learns in
    the same cycle whether it is taken without a skid buffer between (``docs/router.md``).

    **Queues.** ``n_queues`` circular buffers of ``depth`` :class:`QueueEntry` in one LUT RAM;
    with ``depth=2`` and ``tag_slots`` the :class:`QueueTag` part is in two small ones instead,
    one per slot, addressed by queue (read straight from the candidate's register, so that the
    allocation loop does not start with a multiplexer on a LUT RAM's address).

    **Head.** One queue is the *candidate*; its head is offered as ``offer`` to the outputs in
    ``request`` (those it still owes). ``served`` says which took a copy; once every copy is
    taken the entry leaves. The candidate moves to the next queue with something in it when its
    head makes no progress, so a head blocked on a busy output or a torn-down color never holds
    back another queue. Each queue keeps its own "copies still owed" mask (in a LUT RAM addressed
    by queue), so a half-sent multicast survives a rotation. A ``torn`` head waits until its
    color reopens, then is looked up again (``head``) and routed or dropped; a switch command
    held so is forwarded without being applied (the configuration that reopened the color set
    its position).

    Without ``u_turns`` the copy a route would send back out of ``port`` is not made (and a
    route left with no output drops the wavelet): a mesh's color plan never asks for one, and
    the crossbar is then 4:1 per output.

    Latency: a wavelet taken at a clock edge can be offered in the next cycle.
    """

    def __init__(self, *, n_queues, depth, n_colors, cfg_color, port=None, u_turns=True,
                 tag_slots=True):
        self.n_queues = integer("n_queues", n_queues, 1, 9)
        self.depth = integer("depth", depth, 2)
        self.n_colors = integer("n_colors", n_colors, 1, MAX_COLORS)
        self.cfg_color = cfg_color
        self.port = None if port is None else Direction(port)
        self.u_turns = bool(u_turns)
        self.tag_slots = bool(tag_slots)
        if not self.u_turns and self.port is None:
            raise ValueError("an input without U-turns needs its port")
        super().__init__({
            "i": In(stream.Signature(Wavelet)),
            "queue": In(range(self.n_queues)),
            "cfg_route": In(PortRoute),
            "enable": In(1),
            "arrive": Out(RouteLookup()),
            "head": Out(RouteLookup()),
            "update": Out(stream.Signature(RouteUpdate)),
            "request": Out(5),
            "offer": Out(Wavelet),
            "served": In(5),
            "drops": Out(range(3)),
            "empty": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        Q, D = self.n_queues, self.depth
        ptr_bits = (D - 1).bit_length()
        lock = Signal()              # an update of ours is being applied: wait a cycle

        # Arrival.
        w = self.i.payload
        is_cfg = Const(0) if self.cfg_color is None else (w.color == self.cfg_color)
        cfg = data.View(ConfigPayload, w.data)
        op = data.View(ControlPayload, w.data).op
        m.d.comb += self.arrive.color.eq(w.color)
        route = Signal(PortRoute)
        m.d.comb += route.eq(Mux(is_cfg, self.cfg_route, self.arrive.route))
        if not self.u_turns:        # never back out of the port it came in by
            m.d.comb += route.tx.eq(Mux(is_cfg, self.cfg_route.tx, self.arrive.route.tx)
                                    & ~self.port.bit)
        consume = is_cfg & (cfg.hops == 0)
        is_switch = w.ctrl & ~is_cfg & op.as_value().matches(*(o.value for o in _SWITCH_OPS))
        torn = ~is_cfg & route.torn
        drop = Signal()
        bad_cfg = Signal()
        m.d.comb += [
            drop.eq(~torn & (~route.accept | (~consume & (route.tx == 0)))),
            bad_cfg.eq(consume & ((cfg.target >= self.n_colors) |
                                  ~cfg.op.as_value().matches(*(o.value for o in ConfigOp)))),
        ]
        wants_update = ~torn & ~drop & ((consume & ~bad_cfg) | is_switch)
        enqueue = ~consume & ~drop

        # Queue bookkeeping.
        wr = [Signal(max(ptr_bits, 1), name=f"q{q}_wr") for q in range(Q)]
        rd = [Signal(max(ptr_bits, 1), name=f"q{q}_rd") for q in range(Q)]
        # A queue's level as a thermometer (bit k: more than k entries), so that "empty" and
        # "full", which the room, the head and the rotation ask, are one flip-flop each and not
        # a comparison (31 places a tile on the ULX3S, 2-deep queues); flip-flops are cheap.
        level = [Signal(D, name=f"q{q}_level") for q in range(Q)]
        # Whether a queue's head has started (been offered and not popped, or resumed after a
        # teardown), and then the copies it still owes: the masks in a LUT RAM of their own,
        # addressed by the candidate, the one queue whose mask is read or written in a cycle,
        # rather than registers and a multiplexer picking the candidate's (67 places a tile on
        # the ULX3S); the flags stay flip-flops, which a reset clears.
        started = [Signal(name=f"q{q}_started") for q in range(Q)]
        # Without U-turns no mask written (the arrival's, `again`'s, so none owed) has the port's
        # own bit: the masks are stored without it, and the head's is ANDed with the others so
        # that its share of the request and the pop goes (26 places a tile); the same values.
        outs = 0b11111 if self.u_turns else 0b11111 & ~self.port.bit
        out_bits = [k for k in range(5) if outs >> k & 1]
        owed = m.submodules.owed = Memory(shape=len(out_bits), depth=Q, init=[])
        room = Array(~lv[-1] for lv in level)[self.queue]

        # Head of the candidate queue. The wavelets are one LUT RAM addressed by queue and
        # slot, `rd[cand]` (the crossbar's data, not on the allocation loop). The loop starts
        # from the head's tags (its request, the outputs' round robins, the copies served, the
        # pop), so neither layout puts the read pointer's multiplexer in front of their read:
        # - split (`tag_slots` and two slots): the tags are one LUT RAM per slot addressed by
        #   `cand` alone, and the slot is chosen after the read by `rd[cand]`, worked out beside
        #   it. Deeper queues, and boards whose LUT-RAM places or clock it costs, keep the tags
        #   beside the wavelets;
        # - not split: the head's address is a register of its own, loaded with the next
        #   candidate's next read pointer (`cand_d`, `rd_d`: the registers' next values), so the
        #   read starts at a flip-flop. The same cycles either way.
        # Figures and the boards' choices: docs/fpga.md, "The allocation loop: tags per slot,
        # the head's address in a register".
        cand = Signal(range(Q))
        cand_d = Signal(range(Q))
        rd_d = [Signal.like(r, name=f"q{q}_rd_d") for q, r in enumerate(rd)]
        m.d.sync += [cand.eq(cand_d), *(r.eq(r_d) for r, r_d in zip(rd, rd_d))]
        split = self.tag_slots and D == 2
        mem = m.submodules.queues = Memory(shape=Wavelet if split else QueueEntry,
                                           depth=Q << ptr_bits, init=[])
        head_port = mem.read_port(domain="comb")
        if ptr_bits and not split:
            head_addr = Signal(len(head_port.addr))      # loaded below, after the pop
            m.d.comb += head_port.addr.eq(head_addr)
        else:
            m.d.comb += head_port.addr.eq(Cat(Array(rd)[cand], cand) if ptr_bits else cand)
        slots = [Memory(shape=QueueTag, depth=Q, init=[]) for _ in range(D if split else 0)]
        for k, slot in enumerate(slots):
            m.submodules[f"tags{k}"] = slot
        slot_tags = []
        for slot in slots:
            read = slot.read_port(domain="comb")
            m.d.comb += read.addr.eq(cand)
            slot_tags.append(read.data)
        if split:
            head = Signal(QueueEntry)
            m.d.comb += [head.wavelet.eq(head_port.data),
                         head.tag.tx.eq(Array(t.tx for t in slot_tags)[Array(rd)[cand]]),
                         head.tag.torn.eq(Array(t.torn for t in slot_tags)[Array(rd)[cand]])]
        else:
            head = head_port.data
        h_valid = Array(lv[0] for lv in level)[cand]
        h_started = Array(started)[cand]
        owed_read = owed.read_port(domain="comb")
        h_owed = Signal(5)
        m.d.comb += [owed_read.addr.eq(cand),
                     *(h_owed[k].eq(owed_read.data[j]) for j, k in enumerate(out_bits))]

        # A torn head is never offered. The candidate's torn head is looked up again (``head``)
        # and the answer registered; in the next cycle, if its color has reopened, that queue's
        # head is dropped, or marked started with the new route's outputs owed and offered
        # like any other. A switch command held this way is forwarded but not applied: the
        # configuration that reopened its color has set the position (docs/router.md).
        m.d.comb += self.head.color.eq(head.wavelet.color)
        seen = Signal()                      # a torn head's lookup is registered in `again`
        looking = h_valid & ~h_started & head.tag.torn & ~seen
        again = Signal(PortRoute)
        m.d.sync += [seen.eq(looking), again.eq(self.head.route)]
        if not self.u_turns:
            m.d.sync += again.tx.eq(self.head.route.tx & ~self.port.bit)
        reopened = seen & ~again.torn
        h_drop = Signal()
        m.d.comb += h_drop.eq(reopened & (~again.accept | (again.tx == 0)))

        # Updates go through a one-entry slot (a register, so that the update engine's choice
        # among the inputs never reaches this input's ready). The input waits while its update
        # is pending and the cycle the engine applies it.
        slot_valid = Signal()
        slot = Signal(RouteUpdate)
        applying = Signal()
        m.d.comb += [lock.eq(slot_valid | applying),
                     self.update.valid.eq(slot_valid), self.update.payload.eq(slot)]
        m.d.sync += applying.eq(self.update.valid & self.update.ready)
        arrival_update = self.enable & ~lock & self.i.valid & wants_update & (consume | room)
        with m.If(arrival_update):
            m.d.sync += [
                slot_valid.eq(1),
                slot.write.eq(is_cfg & (cfg.op == ConfigOp.WRITE_ROUTE)),
                slot.color.eq(Mux(is_cfg, cfg.target, w.color)),
                slot.cmd.eq(Mux(is_cfg, cfg.cmd, op)),
                slot.position.eq(cfg.position), slot.last.eq(cfg.last),
                slot.rx.eq(cfg.rx), slot.tx.eq(cfg.tx),
            ]
        with m.Elif(self.update.ready):
            m.d.sync += slot_valid.eq(0)

        # Taking the arriving wavelet: not decided by the lookup (a wavelet to drop waits for
        # room in its queue), so that a neighbour's output register, the color it offers and
        # this input's flip-flops are the whole path into that neighbour's allocator.
        take = Signal()
        m.d.comb += take.eq(self.enable & ~lock & (consume | room))
        m.d.comb += self.i.ready.eq(take)
        push = self.i.valid & take & enqueue
        entry = Signal(QueueEntry)
        m.d.comb += [entry.wavelet.eq(w), entry.tag.tx.eq(route.tx), entry.tag.torn.eq(torn)]
        # A forwarded configuration leaves with `hops - 1`: the decrement by `is_cfg` itself, so
        # the carry chain needs no multiplexer after it (6 LUT4 fewer an input on the ULX3S).
        m.d.comb += data.View(ConfigPayload, entry.wavelet.data).hops.eq(cfg.hops - is_cfg)
        write = mem.write_port()
        m.d.comb += [write.addr.eq(Cat(Array(wr)[self.queue], self.queue) if ptr_bits
                                   else self.queue),
                     write.data.eq(entry.wavelet if split else entry), write.en.eq(push)]
        for k, slot in enumerate(slots):
            write = slot.write_port()
            m.d.comb += [write.addr.eq(self.queue), write.data.eq(entry.tag),
                         write.en.eq(push & (Array(wr)[self.queue] == k))]

        # Offering the head.
        present = Signal()
        tx = Mux(h_started, h_owed, head.tag.tx) & outs
        m.d.comb += [
            present.eq(h_valid & (h_started | ~head.tag.torn)),
            self.request.eq(Mux(present, tx, 0)),
            self.offer.eq(head.wavelet),
        ]
        left = tx & ~self.served
        pop = Signal()
        m.d.comb += pop.eq(present & (left == 0))
        resumed = reopened & ~h_drop

        m.d.comb += self.drops.eq((self.i.valid & take & (drop | bad_cfg)) + h_drop)
        m.d.comb += self.empty.eq(~Cat(lv[0] for lv in level).any())

        # Per-queue state.
        content = Signal(Q)      # holds something next cycle (ignoring the candidate's pop)
        for q in range(Q):
            pushed = push & (self.queue == q)
            popped = (pop | h_drop) & (cand == q)
            with m.If(pushed & ~popped):
                m.d.sync += level[q].eq(Cat(Const(1, 1), level[q][:-1]))
            with m.Elif(popped & ~pushed):
                m.d.sync += level[q].eq(level[q][1:])
            m.d.comb += content[q].eq(level[q][0] | pushed)
            m.d.comb += rd_d[q].eq(rd[q])
            if ptr_bits:
                with m.If(pushed):
                    m.d.sync += wr[q].eq(Mux(wr[q] == D - 1, 0, wr[q] + 1))
                with m.If(popped):
                    m.d.comb += rd_d[q].eq(Mux(rd[q] == D - 1, 0, rd[q] + 1))
            with m.If(resumed & (cand == q)):     # not the candidate's pop: a torn head
                m.d.sync += started[q].eq(1)
            with m.Elif(present & (cand == q)):
                m.d.sync += started[q].eq(~pop)
        owed_write = owed.write_port()
        owed_next = Mux(resumed, again.tx, left)      # a popped head's is not read again
        m.d.comb += [owed_write.addr.eq(cand), owed_write.en.eq(resumed | present),
                     owed_write.data.eq(Cat(owed_next[k] for k in out_bits))]

        # The next candidate: stay while the head makes progress, else the next queue (after
        # this one) that holds something; stay when no other queue does.
        m.d.comb += cand_d.eq(cand)
        if Q > 1:
            with m.If((self.served == 0) & ~looking & ~reopened):
                for k in reversed(range(1, Q)):         # later assignments win: nearest first
                    with m.Switch(cand):
                        for c in range(Q):
                            with m.Case(c):
                                with m.If(content[(c + k) % Q]):
                                    m.d.comb += cand_d.eq((c + k) % Q)
        if ptr_bits and not split:
            # The candidate moves only in a cycle in which its head neither pops nor is dropped
            # (nothing served, no reopened head), so the next head's read pointer is the next
            # candidate's, stepped when the head leaves: `rd_d[cand_d]` without a multiplexer
            # of the stepped pointers.
            ptr, head_ptr = Array(rd)[cand_d], Signal(ptr_bits)
            m.d.comb += head_ptr.eq(Mux(pop | h_drop, Mux(ptr == D - 1, 0, ptr + 1), ptr))
            m.d.sync += head_addr.eq(Cat(head_ptr, cand_d))
        return m
