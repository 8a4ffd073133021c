"""What a GEMM program's results look like on the way out: the READs of each owner core's ``Y``
(one exchange per group of rows with distinct reply colors), and the replies, or a raw
program's totals, turned back into ``[n_out, tokens]`` (``docs/mesh.md``, "Layout"). The
functions take a :class:`~fabric.program.GemmProgram`, whose methods of the same names call
them."""

import operator

import numpy as np

from wse.rtl import isa
from wse.rtl.core_params import Y_BASE
from wse.rtl.wavelet import pack, unpack

from . import numerics

__all__ = ["decode_raw", "decode_y", "read_blocks", "read_groups", "read_streams"]

#: Words one READ fetches at most (its ``len`` field, :class:`~rtl.isa.ReadArg`).
MAX_READ = isa.MAX_READ


def _words(fmt, words):
    """32-bit reply words (a wavelet's data) as the numbers they carry (bf16: bit patterns)."""
    value = isa.WORD.unpack(np.asarray(words, dtype=np.int64).astype(np.uint64))["value"]
    return numerics.from_wire(fmt, value, acc=True) if fmt.is_float else value


def read_groups(program):
    """The plan's READ groups (rows with distinct reply colors), each cut to its rows that
    own results; groups left empty are dropped."""
    slots = program.out_placement.slots_per_row()
    groups = [[r for r in rows if slots[r]] for rows in program.config.plan.read_groups()]
    return [rows for rows in groups if rows]

def read_streams(program):
    """``[{row: [wavelets]}]``, one exchange per group of rows with distinct reply colors
    (``ColorPlan.read_groups``; one exchange when every row has a color of its own): for
    each core of a row in column order, ``SELECT c`` and a ``READ`` of its used ``Y`` slots
    (``slots * active`` words from ``0x8000``: the core's READ steps over the inactive
    tokens) on ``cmd``, split into READs of at most :data:`MAX_READ` words when longer.
    Replies come back on ``out(r)`` through outlet ``c``."""
    if program.streamed:
        raise ValueError("a raw or act program's results stream out during the compute "
                         "phase: there is no Y to read (use decode_raw on the compute "
                         "exchange's outlets)")
    cfg = program.config
    cmd = cfg.plan.cmd
    slots = program.out_placement.slots_per_row()
    active = program.active_tokens().tolist()
    exchanges = []
    for rows in read_groups(program):
        streams = {}
        for r in rows:
            streams[r] = []
            for c in range(cfg.cols):
                streams[r].append(int(pack(isa.select_data(c), cmd, 1)))
                words = int(slots[r]) * active[c]
                for start in range(0, words, MAX_READ):
                    length = min(MAX_READ, words - start)
                    # word ``start`` of the walk: its slot's row, its token
                    at = Y_BASE + start // active[c] * cfg.n_tok + start % active[c]
                    streams[r].append(int(pack(isa.read_data(at, length), cmd, 1)))
        exchanges.append(streams)
    return exchanges

def read_blocks(program, outlets):
    """The replies to :meth:`read_streams` (a list with, for each of its exchanges,
    ``{col: [wavelets]}`` as they left the outlets, any interleaving across colors) as
    ``{(r, c): (slots, n_tok) int64}`` blocks for :meth:`decode_y` (the inactive tokens,
    which are not read, as 0)."""
    cfg = program.config
    groups = read_groups(program)
    if not isinstance(outlets, (list, tuple)) or len(outlets) != len(groups):
        raise ValueError(f"outlets must be a list of {len(groups)} dict(s) col -> wavelets, "
                         f"one for each exchange of read_streams, not {type(outlets)}")
    slots = program.out_placement.slots_per_row()
    active = program.active_tokens()
    blocks = {}
    for rows, got in zip(groups, outlets):
        replies = _replies(program, got, {r: int(slots[r]) * active for r in rows}, "READ")
        for r in rows:
            for c in range(cfg.cols):     # a column without real tokens reads nothing
                words = replies.get((r, c), np.zeros(0, dtype=np.int64))
                block = np.zeros((int(slots[r]), cfg.n_tok), dtype=words.dtype)
                block[:, :active[c]] = words.reshape(int(slots[r]), active[c])
                blocks[(r, c)] = block
    return blocks


def decode_y(program, blocks):
    """``Y`` (``[n_out, tokens]`` int64) from ``{(r, c): (slots, n_tok)}`` blocks of the
    requantised results each core holds (rows owning no output may be left out)."""
    cfg, p = program.config, program.out_placement
    slots = p.slots_per_row()
    full = np.zeros((cfg.rows, max(int(slots.max()), 1), cfg.cols, cfg.n_tok),
                    dtype=np.int64)
    for r in range(cfg.rows):
        for c in range(cfg.cols):
            if not slots[r]:
                continue
            if (r, c) not in blocks:
                raise ValueError(f"no Y block of core ({r},{c}), which holds {slots[r]} "
                                 f"result slot(s)")
            block = np.asarray(blocks[(r, c)])
            if block.ndim != 2 or block.shape[0] < slots[r] or block.shape[1] != cfg.n_tok:
                raise ValueError(f"the Y block of core ({r},{c}) must have shape "
                                 f"({slots[r]}, {cfg.n_tok}), not {block.shape}")
            full[r, :slots[r], c] = block[:slots[r]]
    y = _gather(program, full, p.slot_of)
    # the engines wrote only the gated tokens: the rest of a core's Y is what was there
    return y if program.mask is None else np.where(program.mask, y, 0)

def decode_raw(program, outlets):
    """The raw totals ``[n_out, tokens]`` (int64) of a ``CR_OUT`` program, or the activations
    a ``CR_ACT`` program wrote into ``X`` (operands), from what left the outlets during the
    compute exchange (``{col: [wavelets]}``, any interleaving across colors, the order
    within a color kept): row ``r``'s core in column ``c`` sends, for each output it owns in
    stream order (:attr:`output_order`), the words of the tokens its gate let through
    (:meth:`gates`), in token order; the others are 0."""
    if not program.streamed:
        raise ValueError("not a raw or act program: results are in Y (use read_streams, "
                         "read_blocks and decode_y)")
    cfg, p = program.config, program.out_placement
    gates = program.gates()                                    # (n_out, cols, n_tok)
    counts = gates.sum(axis=2)                              # (n_out, cols)
    order = program.output_order
    expected = {}
    for r in range(cfg.rows):
        mine = order[p.row_of[order] == r]
        if mine.size:
            expected[r] = counts[mine].sum(axis=0)
    replies = _replies(program, outlets, expected, "raw result")
    full = np.zeros((program.n_out, cfg.cols, cfg.n_tok), dtype=np.int64)
    for (r, c), words in replies.items():
        mine = order[p.row_of[order] == r]
        o_idx, t_idx = np.nonzero(gates[mine, c])           # row-major: output, token
        full[mine[o_idx], c, t_idx] = words
    t = np.arange(program.tokens)
    return full[:, t % cfg.cols, t // cfg.cols]

def _gather(program, full, slot):
    """``Y[o, t] = full[row_out[o], slot[o], t % cols, t // cols]``."""
    cols = program.config.cols
    t = np.arange(program.tokens)
    return full[program.out_placement.row_of[:, None], slot[:, None], t % cols, t // cols]

def _replies(program, outlets, expected, what):
    """``{(r, c): int64 words}`` of row ``r``'s reply color at outlet ``c`` for the rows of
    ``expected`` (which reply in one exchange: distinct colors), checking that each carries
    ``expected[r]`` words (one count, or one per column) and nothing else arrives."""
    cfg = program.config
    if not isinstance(outlets, dict):
        raise ValueError(f"outlets must be a dict col -> wavelets, not {type(outlets)}")
    extra = set(outlets) - set(range(cfg.cols))
    if extra:
        raise ValueError(f"outlets has no column {min(extra)!r} (the mesh has "
                         f"{cfg.cols})")
    row_of = {cfg.plan.out(r): r for r in expected}
    replies = {}
    for c in range(cfg.cols):
        words = np.array([operator.index(w) for w in outlets.get(c, ())], dtype=np.uint64)
        data, color, _ = unpack(words)
        foreign = ~np.isin(color, list(row_of))
        if foreign.any():
            raise ValueError(f"outlet {c} carried a wavelet of color "
                             f"{int(color[foreign][0])}, which is no reply color of rows "
                             f"{sorted(expected)}")
        for r in expected:
            mine = data[color == cfg.plan.out(r)]
            want = int(np.broadcast_to(expected[r], cfg.cols)[c])
            if mine.size != want:
                raise ValueError(f"outlet {c} carried {mine.size} {what} word(s) of row {r} "
                                 f"(color {cfg.plan.out(r)}), expected {want}")
            if want:
                replies[(r, c)] = _words(cfg.fmt, mine)
    return replies
