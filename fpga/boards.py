"""The boards a mesh is built for: platform, clock, mesh configuration and build options.

One :class:`Board` per supported board, in :data:`BOARDS` by the name ``wse build --board``
takes. The mesh configuration of each board (``Board.config``) is the part of
:class:`~fabric.config.MeshConfig` that is not the mesh's shape: ``docs/fpga.md`` says why each
board uses what it uses.
"""

from dataclasses import dataclass, field

from amaranth_boards.icebreaker import ICEBreakerPlatform
from amaranth_boards.ulx3s import ULX3S_85F_Platform

from wse.fabric.config import MeshConfig

__all__ = ["Board", "BOARDS", "board", "mesh_config"]


@dataclass(frozen=True)
class Board:
    """A board: how to build a mesh for it.

    Parameters
    ----------
    name : str
        The name ``wse build --board`` takes.
    platform : type
        The ``amaranth-boards`` platform class.
    family : str
        ``"ice40"`` or ``"ecp5"`` (picks the PLL and how reports are read).
    target_mhz : float
        The mesh's clock (a PLL makes it from the board's oscillator when they differ). The
        defaults are the oscillators: the iCEBreaker's 1x1 reaches 24.6 to 25.1 MHz and the
        ULX3S's 4x4 54.4 to 56.6 MHz over seeds 1 to 3 (``docs/fpga.md``);
        ``wse build --clock`` asks for more.
    default_mesh : (int, int)
        ``make bitstream``'s mesh for this board.
    config : dict
        :class:`~fabric.config.MeshConfig` fields other than ``rows`` and ``cols``.
    synth_opts : str
        Options of Yosys's ``synth_<family>``.
    nextpnr_opts : str
        Options of nextpnr besides the report, the seed and ``--timing-allow-fail``.
    keep_tiles : bool
        Whether a mesh of more than one tile synthesises the shared tile module once and keeps
        it (``fpga/build.py``), or flattens every tile into the top.
    reset_button : (str, int) or None
        Button resource that resets the mesh while pressed.
    leds : dict
        ``{"heartbeat": (resource, number), "error": ..., "busy": ...}`` (``busy`` optional).
    baud : int
        Serial bridge baud rate.
    env : dict
        Environment the platform build needs besides the toolchain (``OPENFPGALOADER=true``:
        the ULX3S platforms list the programmer as a required tool even for a build only).
    """
    name: str
    platform: type
    family: str
    target_mhz: float
    default_mesh: tuple
    config: dict = field(default_factory=dict)
    synth_opts: str = ""
    nextpnr_opts: str = ""
    keep_tiles: bool = True
    reset_button: tuple = None
    leds: dict = field(default_factory=dict)
    baud: int = 115200
    env: dict = field(default_factory=dict)

    @property
    def device(self):
        return self.platform.device


BOARDS = {
    "icebreaker": Board(
        name="icebreaker", platform=ICEBreakerPlatform, family="ice40", target_mhz=12,
        default_mesh=(1, 1),
        # The UP5K has 5280 logic cells, 30 4-kbit block RAMs and 8 DSPs, and no LUT RAM: the
        # router's queues and route copies and the core's accumulators are flip-flops here.
        # Small cores (8 features, 1 token, 8 outputs), 2-deep router queues and psum FIFOs,
        # two accumulator buffers; the counters with an adder for the READ engine of its own
        # (the same counts: their shared adder was the critical path once the ramp was
        # registered). Results never depend on these choices: a GEMM with more tokens is cut
        # into blocks that fit. ``-dff``: ABC9 sees the flip-flops too and drops the state a
        # 1x1 never reaches (unmapped queues, undriven inputs): 89 % of the logic cells went
        # to 77 % (docs/fpga.md; tests/test_gate_level.py runs the netlist against the RTL).
        # The router queues' tags beside their wavelets (tag_slots=False): in memories of their
        # own, a path shorter on the ECP5's LUT RAM, they cost this board clock (docs/fpga.md).
        config=dict(n_feat=8, n_tok=1, n_out=8, depth=2, acc_buffers=2, psum_depth=2,
                    counter_adders=2, tag_slots=False),
        synth_opts="-dsp -dff",
        # Placed as the ULX3S is, timing weighted up (router1 kept: router2 lost 2-3 MHz here):
        # the 1x1 at 25.27 / 24.51 / 25.63 MHz over seeds 1-3 where the defaults gave
        # 23.83 / 23.77 / 23.61 (docs/fpga.md).
        nextpnr_opts="--placer-heap-timingweight 160 --placer-heap-critexp 8 --tmg-ripup",
        reset_button=("button", 0),
        leds={"heartbeat": ("led", 1), "error": ("led", 0)},
    ),
    "ulx3s-85f": Board(
        name="ulx3s-85f", platform=ULX3S_85F_Platform, family="ecp5", target_mhz=25,
        # The 4x4, flattened: each position folds its straps (routes, colors, row, column) and
        # drops the logic of edge ports that lead nowhere (2848.5 LUT4 places a PE on 2026-11-27;
        # a kept tile module was about 5400 when this was decided, sixteen of which exceeded the
        # 83 640 LUT4s). nextpnr's
        # router2 routes it in 12 to 18 minutes where router1 had not converged after 15
        # (docs/fpga.md).
        default_mesh=(4, 4),
        keep_tiles=False,
        # ABC9 without the PFU multiplexers (wide LUTs): 5.7 % fewer LUT4s on the 4x4, and its
        # fmax at seed 1 35.9 MHz against 34.2 (docs/fpga.md).
        synth_opts="-nowidelut",
        # nextpnr's analytic placer weighting timing 16 times its default, with criticalities
        # sharpened (exponent 8 for 2) and timing-driven rip-up: the 4x4 at 53.84 / 51.99 /
        # 53.00 MHz over seeds 1-3 where the defaults placed each tile over half the device
        # (34.7 MHz; docs/fpga.md).
        nextpnr_opts=("--router router2 --placer-heap-timingweight 160 --placer-heap-critexp 8 "
                      "--tmg-ripup"),
        # The simulators' cores (MeshConfig's defaults) but 4 accumulator buffers, not 8: the
        # buffers are LUT RAM behind a multiplexer, and 4 of them save about 400 LUT4 a tile.
        # Timing only (a row runs at most 3 outputs ahead of a slower neighbour, not 7): results
        # never depend on it, cycle counts on the board may differ from the simulations'.
        # Two copies of the command FIFO's held parts: with one, Yosys merges the two reads that
        # load the head into one port behind the dispatcher's late take (docs/fpga.md).
        # Router queues 2 deep (as the peers were compared) with the tags beside the wavelets
        # (``tag_slots=False``: 15 LUT-RAM cells fewer a router, and the 4x4 takes nearly all
        # the device's LUT-RAM places): the same cycles as 4 deep in the GEMMs measured, about
        # 100 LUT4 fewer a tile (docs/fpga.md). Each router's crossbar output is a tree of 2:1
        # multiplexers (``crossbar="binary"``), which the build maps to two LUT4s and the
        # slice's PFUMX a bit instead of three LUT4s: about 200 fewer an interior tile, the
        # same cycles (docs/fpga.md).
        config=dict(acc_buffers=4, held_copies=2, depth=2, tag_slots=False, crossbar="binary"),
        reset_button=("button_fire", 0),
        leds={"heartbeat": ("led", 0), "error": ("led", 1), "busy": ("led", 2)},
        env={"OPENFPGALOADER": "true"},
    ),
}


def board(name):
    """The :class:`Board` called ``name``; a ``ValueError`` naming the known ones otherwise."""
    try:
        return BOARDS[name]
    except KeyError:
        raise ValueError(f"board must be one of {', '.join(BOARDS)}, not {name!r}") from None


def mesh_config(board, rows=None, cols=None, **overrides):
    """The :class:`~fabric.config.MeshConfig` of a ``rows x cols`` mesh on ``board`` (its
    default mesh when not given); ``overrides`` change the board's core parameters."""
    default_rows, default_cols = board.default_mesh
    fields = {**board.config, **overrides}
    return MeshConfig(rows=default_rows if rows is None else rows,
                      cols=default_cols if cols is None else cols, **fields)
