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
    N_PORTS,
    PORT_MASK,
    ConfigOp,
    ConfigPayload,
    ControlOp,
    ControlPayload,
    Direction,
    Wavelet,
)

__all__ = ["Arrival", "CandidateRotation", "QueueEntry", "QueueStore", "QueueTag", "RouterInput"]

_SWITCH_OPS = (ControlOp.ADVANCE, ControlOp.RESET, ControlOp.TEARDOWN)


class QueueTag(data.Struct):
    """What a queued wavelet's route gave it on arrival."""
    tx:   N_PORTS   # output ports still to copy to when it reaches the head
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

    **Queues** (:class:`QueueStore`). ``n_queues`` circular buffers of ``depth``
    :class:`QueueEntry` in one LUT RAM; with ``depth=2`` and ``tag_slots`` the :class:`QueueTag`
    part is in two small ones instead, one per slot, addressed by queue (read straight from the
    candidate's register, so that the allocation loop does not start with a multiplexer on a
    LUT RAM's address).

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
            "request": Out(N_PORTS),
            "offer": Out(Wavelet),
            "served": In(N_PORTS),
            "drops": Out(range(3)),
            "empty": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        Q, D = self.n_queues, self.depth
        lock = Signal()              # an update of ours is being applied: wait a cycle
        arrival = m.submodules.arrival = Arrival(n_colors=self.n_colors, cfg_color=self.cfg_color,
                                                 port=self.port, u_turns=self.u_turns)
        store = m.submodules.store = QueueStore(n_queues=Q, depth=D,
                                                tag_slots=self.tag_slots)
        rotation = m.submodules.rotation = CandidateRotation(Q)
        wiring.connect(m, arrival.lookup, wiring.flipped(self.arrive))
        m.d.comb += [arrival.i.eq(self.i.payload), arrival.cfg_route.eq(self.cfg_route)]
        drop, bad_cfg, consume = arrival.drop, arrival.bad_cfg, arrival.consume
        cand, cand_d = rotation.cand, rotation.next
        # A queue's level as a thermometer (bit k: more than k entries): "empty" and "full" are
        # one flip-flop each, not a comparison.
        level = [Signal(D, name=f"q{q}_level") for q in range(Q)]
        # Whether a queue's head has started (offered and not popped, or resumed after a
        # teardown; flip-flops, which a reset clears), and then the copies it still owes: in a
        # LUT RAM addressed by the candidate, the one queue whose mask is used in a cycle.
        started = [Signal(name=f"q{q}_started") for q in range(Q)]
        # Without U-turns no mask written (the arrival's, `again`'s) has the port's own bit: the
        # masks are stored without it, and the head's is ANDed with the others.
        outs = PORT_MASK if self.u_turns else PORT_MASK & ~self.port.bit
        out_bits = [k for k in range(N_PORTS) if outs >> k & 1]
        owed = m.submodules.owed = Memory(shape=len(out_bits), depth=Q, init=[])
        room = Array(~lv[-1] for lv in level)[self.queue]
        head = store.head
        h_valid = Array(lv[0] for lv in level)[cand]
        h_started = Array(started)[cand]
        owed_read = owed.read_port(domain="comb")
        h_owed = Signal(N_PORTS)
        m.d.comb += [owed_read.addr.eq(cand),
                     *(h_owed[k].eq(owed_read.data[j]) for j, k in enumerate(out_bits))]
        looking, again, reopened, h_drop = self._torn_head(m, head, h_valid, h_started)

        # Updates go through a one-entry slot (a register, so that the update engine's choice
        # among the inputs never reaches this input's ready). The input waits while its update
        # is pending and the cycle the engine applies it.
        slot_valid = Signal()
        slot = Signal(RouteUpdate)
        applying = Signal()
        m.d.comb += [lock.eq(slot_valid | applying),
                     self.update.valid.eq(slot_valid), self.update.payload.eq(slot)]
        m.d.sync += applying.eq(self.update.valid & self.update.ready)
        arrival_update = (self.enable & ~lock & self.i.valid & arrival.wants_update
                          & (consume | room))
        with m.If(arrival_update):
            m.d.sync += slot_valid.eq(1)
            m.d.sync += [getattr(slot, name).eq(getattr(arrival.update, name))
                         for name in ("write", "color", "cmd", "position", "last", "rx", "tx")]
        with m.Elif(self.update.ready):
            m.d.sync += slot_valid.eq(0)

        # Taking the arriving wavelet: not decided by the lookup (a wavelet to drop waits for
        # room in its queue), so that a neighbour's output register, the color it offers and
        # this input's flip-flops are the whole path into that neighbour's allocator.
        take = Signal()
        m.d.comb += take.eq(self.enable & ~lock & (consume | room))
        m.d.comb += self.i.ready.eq(take)
        push = self.i.valid & take & arrival.enqueue
        m.d.comb += [store.push.eq(push), store.queue.eq(self.queue), store.entry.eq(arrival.entry),
                     store.cand.eq(cand), store.cand_d.eq(cand_d)]

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
        m.d.comb += store.leave.eq(pop | h_drop)

        m.d.comb += self.drops.eq((self.i.valid & take & (drop | bad_cfg)) + h_drop)
        m.d.comb += self.empty.eq(~Cat(lv[0] for lv in level).any())

        # Per-queue state.
        for q in range(Q):
            pushed = push & (self.queue == q)
            popped = (pop | h_drop) & (cand == q)
            with m.If(pushed & ~popped):
                m.d.sync += level[q].eq(Cat(Const(1, 1), level[q][:-1]))
            with m.Elif(popped & ~pushed):
                m.d.sync += level[q].eq(level[q][1:])
            # holds something next cycle (ignoring the candidate's pop)
            m.d.comb += rotation.content[q].eq(level[q][0] | pushed)
            with m.If(resumed & (cand == q)):     # not the candidate's pop: a torn head
                m.d.sync += started[q].eq(1)
            with m.Elif(present & (cand == q)):
                m.d.sync += started[q].eq(~pop)
        owed_write = owed.write_port()
        owed_next = Mux(resumed, again.tx, left)      # a popped head's is not read again
        m.d.comb += [owed_write.addr.eq(cand), owed_write.en.eq(resumed | present),
                     owed_write.data.eq(Cat(owed_next[k] for k in out_bits))]
        # the candidate stays while its head makes progress
        m.d.comb += rotation.move.eq((self.served == 0) & ~looking & ~reopened)
        return m

    def _torn_head(self, m, head, h_valid, h_started):
        """A torn head is never offered. The candidate's torn head is looked up again
        (``head``) and the answer registered (``again``); in the next cycle, if its color has
        reopened, that queue's head is dropped (``h_drop``), or marked started with the new
        route's outputs owed and offered like any other. A switch command held this way is
        forwarded but not applied: the configuration that reopened its color has set the
        position (``docs/router.md``)."""
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
        return looking, again, reopened, h_drop


class Arrival(wiring.Component):
    """What the wavelet on ``i`` is, from its route (``lookup``, or ``cfg_route`` for the
    configuration color): a drop (``drop``, ``bad_cfg``), a configuration for this router
    (``consume``), an update for the route state (``wants_update``, with ``update``), and the
    :class:`QueueEntry` it is queued as (``enqueue``, ``entry``; a configuration to forward with
    ``hops - 1``). Combinational; the rules are :class:`RouterInput`'s.

    Members
    -------
    i, cfg_route, lookup : In(Wavelet), In(PortRoute), Out(RouteLookup())
    drop, bad_cfg, consume, wants_update, enqueue : Out(1)
    update : Out(RouteUpdate)
        The update a configuration for this router or a switch command asks.
    entry : Out(QueueEntry)
    """

    def __init__(self, *, n_colors, cfg_color, port, u_turns):
        self.n_colors, self.cfg_color, self.port, self.u_turns = n_colors, cfg_color, port, u_turns
        super().__init__({
            "i": In(Wavelet), "cfg_route": In(PortRoute), "lookup": Out(RouteLookup()),
            "drop": Out(1), "bad_cfg": Out(1), "consume": Out(1), "wants_update": Out(1),
            "enqueue": Out(1), "update": Out(RouteUpdate), "entry": Out(QueueEntry),
        })

    def elaborate(self, platform):
        m = Module()
        w = self.i
        is_cfg = Const(0) if self.cfg_color is None else (w.color == self.cfg_color)
        cfg = data.View(ConfigPayload, w.data)
        op = data.View(ControlPayload, w.data).op
        m.d.comb += self.lookup.color.eq(w.color)
        route = Signal(PortRoute)
        m.d.comb += route.eq(Mux(is_cfg, self.cfg_route, self.lookup.route))
        if not self.u_turns:        # never back out of the port it came in by
            m.d.comb += route.tx.eq(Mux(is_cfg, self.cfg_route.tx, self.lookup.route.tx)
                                    & ~self.port.bit)
        consume = is_cfg & (cfg.hops == 0)
        is_switch = w.ctrl & ~is_cfg & op.as_value().matches(*(o.value for o in _SWITCH_OPS))
        torn = ~is_cfg & route.torn
        drop, bad_cfg = self.drop, self.bad_cfg
        m.d.comb += [
            drop.eq(~torn & (~route.accept | (~consume & (route.tx == 0)))),
            bad_cfg.eq(consume & ((cfg.target >= self.n_colors) |
                                  ~cfg.op.as_value().matches(*(o.value for o in ConfigOp)))),
        ]
        wants_update = ~torn & ~drop & ((consume & ~bad_cfg) | is_switch)
        m.d.comb += [self.consume.eq(consume), self.wants_update.eq(wants_update),
                     self.enqueue.eq(~consume & ~drop)]
        slot, entry = self.update, self.entry       # what the input's update slot takes
        m.d.comb += [
            slot.write.eq(is_cfg & (cfg.op == ConfigOp.WRITE_ROUTE)),
            slot.color.eq(Mux(is_cfg, cfg.target, w.color)),
            slot.cmd.eq(Mux(is_cfg, cfg.cmd, op)),
            slot.position.eq(cfg.position), slot.last.eq(cfg.last),
            slot.rx.eq(cfg.rx), slot.tx.eq(cfg.tx),
        ]
        m.d.comb += [entry.wavelet.eq(w), entry.tag.tx.eq(route.tx), entry.tag.torn.eq(torn)]
        # A forwarded configuration leaves with `hops - 1`: the decrement by `is_cfg` itself, so
        # the carry chain needs no multiplexer after it.
        m.d.comb += data.View(ConfigPayload, entry.wavelet.data).hops.eq(cfg.hops - is_cfg)
        return m


class QueueStore(wiring.Component):
    """The queues' storage (:class:`RouterInput`'s **Queues**): ``n_queues`` circular buffers of
    ``depth`` :class:`QueueEntry`, their pointers, and the head of queue ``cand``.

    The wavelets are one LUT RAM addressed by queue and slot. The allocation loop starts from
    the head's tags, so neither layout puts the read pointer's multiplexer in front of their
    read: split (``tag_slots`` and ``depth=2``), one tag LUT RAM per slot addressed by ``cand``
    alone, the slot chosen after the read; not split, the head's address a register of its own,
    loaded with the next candidate's (``cand_d``) next read pointer. The same cycles either way
    (the boards' choices: ``docs/fpga.md``). ``push`` writes ``entry`` into queue ``queue``;
    ``leave`` steps the read pointer of ``cand``. Latency: an entry pushed at a clock edge can
    be the head in the next cycle. Bad input: not checked (the caller pushes only into a queue
    with room, and leaves only a head that is there).

    Members
    -------
    push : In(1)
    queue : In(range(n_queues))
    entry : In(QueueEntry)
    cand, cand_d : In(range(n_queues))
        The candidate queue, and the one it is next cycle.
    leave : In(1)
    head : Out(QueueEntry)
    """

    def __init__(self, *, n_queues, depth, tag_slots):
        self.n_queues, self.depth, self.tag_slots = n_queues, depth, tag_slots
        super().__init__({
            "push": In(1), "queue": In(range(n_queues)), "entry": In(QueueEntry),
            "cand": In(range(n_queues)), "cand_d": In(range(n_queues)), "leave": In(1),
            "head": Out(QueueEntry),
        })

    def elaborate(self, platform):
        m = Module()
        Q, D, cand, head = self.n_queues, self.depth, self.cand, self.head
        ptr_bits = (D - 1).bit_length()
        wr = [Signal(max(ptr_bits, 1), name=f"q{q}_wr") for q in range(Q)]
        rd = [Signal(max(ptr_bits, 1), name=f"q{q}_rd") for q in range(Q)]
        rd_d = [Signal.like(r, name=f"q{q}_rd_d") for q, r in enumerate(rd)]
        m.d.sync += [r.eq(r_d) for r, r_d in zip(rd, rd_d)]
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
        slot_tags = []
        for k, slot in enumerate(slots):
            m.submodules[f"tags{k}"] = slot
            read = slot.read_port(domain="comb")
            m.d.comb += read.addr.eq(cand)
            slot_tags.append(read.data)
        if split:
            m.d.comb += [head.wavelet.eq(head_port.data),
                         head.tag.tx.eq(Array(t.tx for t in slot_tags)[Array(rd)[cand]]),
                         head.tag.torn.eq(Array(t.torn for t in slot_tags)[Array(rd)[cand]])]
        else:
            m.d.comb += head.eq(head_port.data)
        write = mem.write_port()
        m.d.comb += [write.addr.eq(Cat(Array(wr)[self.queue], self.queue) if ptr_bits
                                   else self.queue),
                     write.data.eq(self.entry.wavelet if split else self.entry),
                     write.en.eq(self.push)]
        for k, slot in enumerate(slots):
            write = slot.write_port()
            m.d.comb += [write.addr.eq(self.queue), write.data.eq(self.entry.tag),
                         write.en.eq(self.push & (Array(wr)[self.queue] == k))]
        for q in range(Q):
            m.d.comb += rd_d[q].eq(rd[q])
            if ptr_bits:
                with m.If(self.push & (self.queue == q)):
                    m.d.sync += wr[q].eq(Mux(wr[q] == D - 1, 0, wr[q] + 1))
                with m.If(self.leave & (cand == q)):
                    m.d.comb += rd_d[q].eq(Mux(rd[q] == D - 1, 0, rd[q] + 1))
        if ptr_bits and not split:
            # The candidate moves only in a cycle in which its head neither pops nor is dropped
            # (nothing served, no reopened head), so the next head's read pointer is the next
            # candidate's, stepped when the head leaves: `rd_d[cand_d]` without a multiplexer
            # of the stepped pointers.
            ptr, head_ptr = Array(rd)[self.cand_d], Signal(ptr_bits)
            m.d.comb += head_ptr.eq(Mux(self.leave, Mux(ptr == D - 1, 0, ptr + 1), ptr))
            m.d.sync += head_addr.eq(Cat(head_ptr, self.cand_d))
        return m


class CandidateRotation(wiring.Component):
    """The candidate queue (``cand``, a register) and the one it is next cycle (``next``): with
    ``move``, the next queue after it (in a circle) whose ``content`` bit is set, else itself.

    Members
    -------
    move, content : In(1), In(n_queues)
        Whether to move; which queues hold something next cycle.
    cand, next : Out(range(n_queues))
    """

    def __init__(self, n_queues):
        self.n_queues = n_queues
        super().__init__({"move": In(1), "content": In(n_queues),
                          "cand": Out(range(n_queues)), "next": Out(range(n_queues))})

    def elaborate(self, platform):
        m = Module()
        Q, cand, cand_d, content = self.n_queues, self.cand, self.next, self.content
        m.d.sync += cand.eq(cand_d)
        m.d.comb += cand_d.eq(cand)
        if Q > 1:
            with m.If(self.move):
                for k in reversed(range(1, Q)):         # later assignments win: nearest first
                    with m.Switch(cand):
                        for c in range(Q):
                            with m.Case(c):
                                with m.If(content[(c + k) % Q]):
                                    m.d.comb += cand_d.eq((c + k) % Q)
        return m
