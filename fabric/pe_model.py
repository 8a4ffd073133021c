"""Golden model of the processing element's core: dispatcher, memories, MACs, partial-sum engine.

Pure numpy and untimed: the contract of ``docs/pe.md`` as executable code. Given a core's
wavelets it says which words the core sends and what ``X``, ``Y`` and the counters end as; the
RTL core (``rtl/core.py``, next) is checked against it bit for bit. The arithmetic is
:mod:`fabric.numerics`; the wavelet and payload layouts are :mod:`rtl.isa`; the command builders
(``addr``, ``load``, ``read``, ``select``, ``weight``, ``cr``, ``mask``, ``psums``) are
:mod:`fabric.pe_commands`, re-exported here for the model's callers; which wavelets a core keeps
and how it reads their fields, :mod:`fabric.pe_intake`.

Timing model (the choices the RTL comparison must respect):

- Commands run one at a time in ramp order; ``busy_cycles`` adds each command's cost.
- The partial-sum engine does all of a CR's work when the CR is dispatched, so a later READ sees
  its ``Y`` and counters. ``stall_cycles`` is timing-dependent in the RTL and stays 0 here.
- Every psum wavelet in ``run()``'s input is queued before any command runs (the psum FIFOs do
  not depend on the command FIFO), then the psum lists; a CR takes from those queues.
- A READ of a counter gives its value when the READ starts (before its own cost, words and
  errors). ``wavelets_in`` there counts the wavelets the core must have kept by then: the ramp
  wavelets up to and including the READ, and psums the engine has used. After ``run()`` it counts
  every wavelet given to it, psum list entries and dropped wavelets included, but not SELECTs,
  not the ``cmd`` wavelets it discarded while another column was selected, and not the MASKs of
  other columns (discarded too).
- The gate (one bit per local token) is read by an AXPY when it runs and by the partial-sum
  engine when a CR or CR_OUT takes effect: the engine visits only the gated tokens, in order
  (their psums, totals and ``Y`` words; the others' ``Y`` words stay as they were). Every CR
  that takes effect (not a dropped one; one with ``skip`` too) sets it again to the *active*
  tokens: those below the count of the last TOKENS, all of them after reset. A MASK lasts until
  the end of the output it comes in; TOKENS sets the gate at once (cost 1; a count above
  ``n_tok`` is an error, nothing changes). Below the counters, the load pointer and a READ's
  address step over the inactive tokens: from a row's last active token of ``X`` or ``Y`` to
  the next row's first, so a load or a read of a GEMM's real tokens is one contiguous stream.
- A carriage return's flags (:class:`~rtl.isa.CrArg`): ``quiet_n`` / ``quiet_s`` take no
  psums from that side (as on a row with no neighbour there); ``skip`` hands nothing to the
  engine (no psums taken or sent, no ``Y`` written, no raw totals) and leaves the accumulators
  as they are, so whatever they hold carries into the next output; it costs what a CR costs
  (0 busy cycles). The result-slot check comes first: a dropped CR is dropped, flags or not.
- A CR_ACT is a CR whose owner row writes ``relu(requantise(s))`` into ``X[o // rows]`` for the
  gated tokens (their nonzero bits follow; the other tokens' words stay) and sends those words
  on ``out`` as a READ of them would; its slot must be below ``n_feat`` (not ``n_out``).
- A CR_DELTA is a CR_ACT without the ReLU whose owner's engine visits every *active* token,
  whatever the gate, and writes ``requantise(s)`` where the gate is set and ``0`` where it is
  clear (the gate, set by the owner row's MASKs, is the ReLU's derivative in the delta pass: its
  AXPYs skip the tokens it clears, and every active word of the slot is written). A TOKENS waits
  for the engine, so the active tokens are the ones the CR_DELTA's AXPYs ran under.
- An AXPY of :data:`~rtl.isa.ONES_SLOT` multiplies the format's one
  (:func:`~fabric.numerics.one`) in every token, nonzero: a bias.

Decoding choices where ``docs/pe.md`` is silent: a control opcode acts the same on ``cmd`` and
``weight``; operands are the low ``fmt.width`` bits of the data, sign-extended; a psum is the low
``fmt.acc_width`` bits, sign-extended (the ctrl bit of a psum wavelet is ignored); an AXPY with a
bad slot is an error even when its weight is 0; a dropped command costs 1 cycle and has no other
effect (a dropped CR leaves the accumulators alone and takes no psums); a READ costs 1 + 2 per
word; READ addresses and the load pointer wrap at 16 bits. A MASK (on ``cmd`` or ``weight``) is
kept only by the core of its ``col`` (on ``cmd`` only while that core's column is selected); the
core's own costs 1 and is an error (gate unchanged) when its chunk holds none of the core's
tokens (``16 * chunk >= n_tok``); a MASK on a foreign color is dropped as one of that color.
"""

import operator
from collections import deque
from collections.abc import Iterable, Sequence

import numpy as np

from wse.fabric import numerics
from wse.rtl import isa
from wse.rtl.core_params import COUNTER_BASE, COUNTERS, Y_BASE, CoreColors, CoreParams
from wse.rtl.wavelet import WAVELET_BITS, ControlOp, unpack

from .pe_commands import addr, cr, load, mask, psums, read, select, tokens, weight
from .pe_intake import decode_fields, selection

__all__ = [
    "Y_BASE", "COUNTER_BASE", "COUNTERS", "CoreColors", "CoreParams", "CoreModel",
    "addr", "load", "read", "select", "weight", "cr", "mask", "tokens", "psums", "selection",
    "axpy_cycles",
]

_WORD = (1 << 32) - 1
_ADDRESSES = 1 << isa.ADDR_ARG.fields["addr"][1]        # the load pointer and READs wrap here
_CR_OPS = {ControlOp.CR.value, ControlOp.CR_OUT.value, ControlOp.CR_ACT.value,
           ControlOp.CR_DELTA.value}
_SWITCH_OPS = {ControlOp.NOP.value, ControlOp.ADVANCE.value, ControlOp.RESET.value,
               ControlOp.TEARDOWN.value}


def axpy_cycles(params: CoreParams, mask_row, gate=None) -> int:
    """Cycles of an AXPY with a nonzero weight over a slot whose nonzero mask is ``mask_row``,
    under the core's ``gate`` (all ones by default): ``max(1, max over banks b of the tokens t
    with t % lanes == b, nonzero and gated on)``."""
    mask = np.asarray(mask_row, dtype=bool)
    if mask.shape != (params.n_tok,):
        raise ValueError(f"mask_row must have shape ({params.n_tok},), not {mask.shape!r}")
    if gate is not None:
        gate = np.asarray(gate, dtype=bool)
        if gate.shape != (params.n_tok,):
            raise ValueError(f"gate must have shape ({params.n_tok},), not {gate.shape!r}")
        mask = mask & gate
    return max(1, int(mask.reshape(params.tpb, params.lanes).sum(axis=0).max()))


class CoreModel:
    """The core's state and behaviour. State persists across :meth:`run` calls.

    Members
    -------
    x : (n_feat, n_tok) int64, the activations; ``mask`` is where they are not zero.
    y : (n_out, n_tok) int64, the requantised results.
    acc : (n_tok,) int64, the active accumulator buffer.
    ptr : int, the load pointer (16 bits, wraps).
    pairs : bool, the last ADDR's ``pairs``: each LOAD writes two words (cost 2).
    selected : int, the column last selected by a SELECT on ``cmd`` (0 after reset): while it
        is not ``params.col``, ``cmd`` wavelets are discarded (not counted in ``wavelets_in``).
    gate : (n_tok,) bool, the tokens an AXPY may multiply (set by MASKs of this core's column,
        all ones after reset and after every CR that takes effect).
    counters : dict of the :data:`COUNTERS` (``stall_cycles`` stays 0: it is timing-dependent).
    error : bool, sticky error flag.
    """

    def __init__(self, params: CoreParams):
        if not isinstance(params, CoreParams):
            raise ValueError(f"params must be a CoreParams, not {params!r}")
        self.params = params
        self.x = np.zeros((params.n_feat, params.n_tok), dtype=np.int64)
        self.y = np.zeros((params.n_out, params.n_tok), dtype=np.int64)
        self.acc = np.zeros(params.n_tok, dtype=np.int64)
        self.ptr = 0
        self.pairs = False
        self.selected = 0
        self.gate = np.ones(params.n_tok, dtype=bool)
        self.active = params.n_tok
        self.counters = dict.fromkeys(COUNTERS, 0)
        self.error = False
        # psum FIFOs by color: (32-bit word, position in this run's ramp; None: from a list,
        # -1: from an earlier run, already counted)
        self._psums = {params.colors.psum_from_n: deque(), params.colors.psum_from_s: deque()}

    @property
    def mask(self) -> np.ndarray:
        """The nonzero mask of ``X``."""
        return ~numerics.is_zero(self.params.fmt, self.x)

    @property
    def pending_psums(self) -> dict[int, int]:
        """Psums received and not yet taken by a carriage return: ``{color: count}``."""
        return {color: len(queue) for color, queue in self._psums.items()}

    def run(self, wavelets: Iterable[int], psum_from_n: Sequence[int] = (),
            psum_from_s: Sequence[int] = ()) -> dict[int, list[int]]:
        """Feed packed 38-bit wavelets in ramp order; return ``{color: [32-bit words]}`` for
        ``psum_to_s``, ``psum_to_n`` and ``out``.

        Wavelets on ``cmd`` / ``weight`` are commands, run in order; wavelets on ``psum_from_n``
        / ``psum_from_s`` are queued for the partial-sum engine (before the psum lists, whose
        entries are 32-bit words, negative ones taken as two's complement); any other color is
        dropped and counted as an error. A SELECT on ``cmd`` sets :attr:`selected`; ``cmd``
        wavelets while another column is selected are discarded, and so are MASKs of other
        columns (SELECTs and discarded wavelets cost nothing and are not counted).
        ``ValueError`` if a CR needs more psums than are queued (the commands before it have
        taken effect).
        """
        c = self.params.colors
        words = [operator.index(w) for w in wavelets]
        for w in words:
            if not 0 <= w < 1 << WAVELET_BITS:
                raise ValueError(f"wavelets must be {WAVELET_BITS}-bit integers, not {w!r}")
        data, color, ctrl = unpack(np.array(words, dtype=np.uint64))
        fields = decode_fields(data)
        data, color, ctrl = data.tolist(), color.tolist(), ctrl.tolist()
        kept = self._select(color, ctrl, fields)
        for i, col in enumerate(color):
            if col in self._psums:
                self._psums[col].append((data[i], i))
        for name, col, given in (("psum_from_n", c.psum_from_n, psum_from_n),
                                 ("psum_from_s", c.psum_from_s, psum_from_s)):
            for v in given:
                v = operator.index(v)
                if not -(1 << 31) <= v <= _WORD:
                    raise ValueError(f"{name} values must fit in 32 bits, not {v!r}")
                self._psums[col].append((v & _WORD, None))
        self._in_base, self._used = self.counters["wavelets_in"], []
        self._kept = np.cumsum(kept).tolist()       # wavelets kept up to and including each
        self._sent = {c.psum_to_s: [], c.psum_to_n: [], c.out: []}
        for i, (col, k) in enumerate(zip(color, ctrl)):
            if not kept[i]:
                continue
            if col in (c.cmd, c.weight):
                self._command(i, {name: values[i] for name, values in fields.items()}, col, k)
            elif col not in self._psums:        # a foreign color: dropped in order, 1 cycle
                self._fail()
                self.counters["busy_cycles"] += 1
        self.counters["wavelets_in"] = (self._in_base + sum(kept) + len(psum_from_n)
                                        + len(psum_from_s))
        for col, queue in self._psums.items():
            self._psums[col] = deque((v, -1) for v, _ in queue)
        return self._sent

    def _select(self, color: list[int], ctrl: list[int], fields: dict) -> list[bool]:
        """Apply the SELECTs among the wavelets in order; which wavelets the core keeps."""
        kept, self.selected = selection(self.params, self.selected, color, ctrl, fields["op"],
                                        fields["col"])
        return kept

    # Commands ------------------------------------------------------------------------------------

    def _command(self, i: int, f: dict[str, int], color: int, ctrl: int) -> None:
        """Run one command; ``f`` holds its data decoded every way (:func:`_decode`)."""
        cost = 1
        if not ctrl and color == self.params.colors.cmd:
            self._load(f["load"])
            if self.pairs:          # the pair's second word, in a cycle of its own
                self._load(f["load_high"])
                cost = 2
        elif not ctrl:
            cost = self._axpy(f["value"], f["slot"])
        else:
            op = f["op"]
            if op == ControlOp.ADDR.value:
                self.ptr, self.pairs = f["addr"], bool(f["pairs"])
            elif op == ControlOp.READ.value:
                cost = self._read(i, f["read_addr"], f["read_len"])
            elif op == ControlOp.MASK.value:       # of this column: selection() took the rest
                self._mask(f["chunk"], f["bits"])
            elif op == ControlOp.TOKENS.value:
                self._tokens(f["count"])
            elif op in _CR_OPS:
                if self._cr(f["o"], raw=op == ControlOp.CR_OUT.value,
                            act=op == ControlOp.CR_ACT.value,
                            delta=op == ControlOp.CR_DELTA.value,
                            quiet_n=f["cr_quiet_n"], quiet_s=f["cr_quiet_s"],
                            skip=f["cr_skip"]):
                    cost = 0      # rides on the AXPY before it, or waits (stall, not busy)
            elif op not in _SWITCH_OPS:
                self._fail()
        self.counters["busy_cycles"] += cost

    def _load(self, value: int) -> None:
        if self.ptr < self.x.size:
            self.x.flat[self.ptr] = numerics.from_wire(self.params.fmt, value)
        else:
            self._fail()
        self.ptr = self._step(self.ptr)

    def _step(self, address: int) -> int:
        """The address after ``address`` for a LOAD or a READ: below the counters, from the
        last active token of a row of ``X`` or ``Y`` (local token ``address % n_tok``) to the
        first token of the next row; elsewhere the next word. Wraps at 16 bits."""
        n_tok = self.params.n_tok
        if address < COUNTER_BASE and address % n_tok + 1 >= self.active:
            return (address // n_tok + 1) * n_tok % _ADDRESSES
        return (address + 1) % _ADDRESSES

    def _mask(self, chunk: int, bits: int) -> None:
        first = isa.MASK_CHUNK * chunk
        if first >= self.params.n_tok:
            self._fail()
            return
        n = min(isa.MASK_CHUNK, self.params.n_tok - first)
        self.gate[first:first + n] = [bits >> j & 1 for j in range(n)]

    def _tokens(self, count: int) -> None:
        if count > self.params.n_tok:
            self._fail()
            return
        self.active = count
        self._open_gate()

    def _open_gate(self) -> None:
        """The gate a carriage return leaves: the active tokens on, the rest off."""
        self.gate = np.arange(self.params.n_tok) < self.active

    def _axpy(self, value: int, slot: int) -> int:
        p = self.params
        value = int(numerics.from_wire(p.fmt, value))
        if slot == isa.ONES_SLOT:
            row = np.full(p.n_tok, numerics.one(p.fmt), dtype=np.int64)
        elif slot < p.n_feat:
            row = self.x[slot]
        else:
            self._fail()
            return 1
        gated = np.where(self.gate, row, 0)          # gated off: as a zero operand
        acc, overflow, issued, skipped_w, skipped_a = numerics.axpy(p.fmt, self.acc, value,
                                                                    gated)
        self.acc = acc
        self._overflow(overflow)
        self.counters["macs_issued"] += issued
        self.counters["macs_skipped_weight"] += skipped_w
        self.counters["macs_skipped_act"] += skipped_a
        zero = numerics.is_zero(p.fmt, value)
        return 1 if zero else axpy_cycles(p, ~numerics.is_zero(p.fmt, gated))

    def _read(self, i: int, address: int, length: int) -> int:
        snapshot = dict(self.counters)
        snapshot["wavelets_in"] = (self._in_base + self._kept[i]
                                   + sum(1 for pos in self._used if pos is None or pos > i))
        for _ in range(length):
            word = self._word(address, snapshot)
            if word is None:
                self._fail()
            self._send(self.params.colors.out, word or 0)
            address = self._step(address)
        return 1 + 2 * length

    def _word(self, address: int, snapshot: dict[str, int]) -> int | None:
        """The 32-bit word at ``address``, or ``None`` outside the map."""
        if address < Y_BASE:
            return int(self.x.flat[address]) & _WORD if address < self.x.size else None
        if address < COUNTER_BASE:
            k = address - Y_BASE
            return int(self.y.flat[k]) & _WORD if k < self.y.size else None
        k = address - COUNTER_BASE
        return snapshot[COUNTERS[k]] & _WORD if k < len(COUNTERS) else None

    def _cr(self, o: int, raw: bool = False, quiet_n: bool = False, quiet_s: bool = False,
            skip: bool = False, act: bool = False, delta: bool = False) -> bool:
        """Hand the accumulators over (with ``skip`` not: only the gate is reset, and the
        accumulators carry into the next output); ``False`` if the CR was dropped as an
        error."""
        p, c = self.params, self.params.colors
        owner, slot = o % p.rows, o // p.rows
        if p.row == owner and not raw and slot >= (p.n_feat if act or delta else p.n_out):
            self._fail()
            return False
        if skip:
            self._open_gate()
            return True
        inputs = [("psum_from_n", c.psum_from_n, 0 < p.row <= owner and not quiet_n),
                  ("psum_from_s", c.psum_from_s, owner <= p.row < p.rows - 1 and not quiet_s)]
        # the engine visits the tokens the gate let through, in order: the rest of the buffer
        # is zero, and no psum, total or Y word of theirs moves; the owner of a CR_DELTA visits
        # every active token and keeps the result where the gate is set
        delta_owner = p.row == owner and delta
        keep = self.gate.copy()
        walk = np.flatnonzero(np.arange(p.n_tok) < self.active if delta_owner else self.gate)
        for name, col, needed in inputs:
            if needed and len(self._psums[col]) < walk.size:
                raise ValueError(f"CR {o} at row {p.row} needs {walk.size} {name} values, "
                                 f"only {len(self._psums[col])} left")
        s = self.acc[walk]
        for _, col, needed in inputs:
            if needed:
                s, overflow = numerics.accumulate(p.fmt, s, self._take(col, walk.size))
                self._overflow(overflow.any())
        if p.row == owner and raw:
            for v in s.tolist():
                self._send(c.out, v & _WORD)
        elif p.row == owner and (act or delta):
            result, overflow = numerics.requantise(p.fmt, s)
            self._overflow(overflow.any())
            if act:
                self.x[slot, walk] = numerics.relu(p.fmt, result)
            else:           # kept where the gate is set: the ReLU's derivative
                self.x[slot, walk] = np.where(keep[walk], result, 0)
            for v in self.x[slot, walk].tolist():
                self._send(c.out, v & _WORD)
        elif p.row == owner:
            self.y[slot, walk], overflow = numerics.requantise(p.fmt, s)
            self._overflow(overflow.any())
        else:
            for v in s.tolist():
                self._send(c.psum_to_s if p.row < owner else c.psum_to_n, v & _WORD)
        self.acc = np.zeros(p.n_tok, dtype=np.int64)
        self._open_gate()
        return True

    # Helpers -------------------------------------------------------------------------------------

    def _take(self, color: int, n: int) -> np.ndarray:
        entries = [self._psums[color].popleft() for _ in range(n)]
        self._used.extend(pos for _, pos in entries)
        return numerics.from_wire(self.params.fmt, [v for v, _ in entries], acc=True)

    def _send(self, color: int, word: int) -> None:
        self._sent[color].append(word)
        self.counters["wavelets_out"] += 1

    def _overflow(self, flag) -> None:
        if flag:
            self.counters["overflow"] = 1

    def _fail(self) -> None:
        self.counters["errors"] += 1
        self.error = True
