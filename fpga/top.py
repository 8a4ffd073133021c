# amaranth: UnusedElaboratable=no
"""Board tops: a mesh behind its serial bridge on a board's UART pins, with clock, reset and LEDs.

:class:`BoardTop` is what a bitstream holds: the :class:`~fpga.bridge.MeshBridge` (the mesh, a
UART and the framing) on the board's UART, the mesh's clock (the board oscillator, or a PLL
when the board's target frequency differs from it), a reset (power-on, PLL lock and a button),
a heartbeat LED and a sticky error LED.
"""

from amaranth.hdl import (
    ClockDomain,
    ClockSignal,
    Const,
    Elaboratable,
    Instance,
    Module,
    ResetSignal,
    Signal,
)
from amaranth.lib import io
from amaranth.lib.cdc import ResetSynchronizer

from wse.fabric.mesh import Mesh

from .bridge import MeshBridge
from .clocks import ECP5PLL, ICE40PLL, ecp5_pll, ice40_pll

__all__ = ["BoardTop"]

#: Power-on reset: cycles the mesh stays in reset after the clock is up (iCE40 block RAMs read
#: as zero for about 3 us after configuration).
POR_CYCLES = 1 << 12


class BoardTop(Elaboratable):
    """A mesh behind its serial bridge on ``board``.

    Parameters
    ----------
    board : fpga.boards.Board
    config : fabric.config.MeshConfig
    clk_hz : float or None
        The mesh's clock; ``board.target_mhz`` by default. When it differs from the board's
        oscillator, a PLL makes it (the nearest frequency the PLL can make: ``self.clk_hz``).

    The heartbeat LED blinks about once a second while the clock runs and reset is released;
    the error LED is the bridge's sticky ``error``; ``busy`` (where the board has a third LED)
    is lit while the mesh works.
    """

    def __init__(self, board, config, *, clk_hz=None):
        self.board = board
        self.config = config
        requested = board.target_mhz * 1e6 if clk_hz is None else float(clk_hz)
        self._osc_hz = _oscillator_hz(board.platform)
        if abs(requested - self._osc_hz) < 1:
            self.pll = None
            self.clk_hz = self._osc_hz
        else:
            pick = ice40_pll if board.family == "ice40" else ecp5_pll
            self.pll = pick(self._osc_hz, requested)
            self.clk_hz = self.pll.out_hz

    def verilog_files(self):
        """``{filename: text}`` the platform must compile with the top: the shared tile."""
        mesh = Mesh(self.config)     # never elaborated (the first line: no warning for it)
        text = mesh.verilog_dependencies()
        return {"wse_tile.v": text} if text else {}

    def elaborate(self, platform):
        m = Module()
        board = self.board
        m.domains.sync = ClockDomain("sync")

        # -- clock ----------------------------------------------------------------------------
        clk_pad = platform.request(platform.default_clk, dir="-")
        clk, locked = Signal(), Signal()
        if self.pll is None:        # the pad's resource carries the clock constraint
            m.submodules.clk_buf = clk_buf = io.Buffer("i", clk_pad)
            m.d.comb += [clk.eq(clk_buf.i), locked.eq(1)]
        else:
            if board.family == "ice40":
                m.submodules.pll = pll = ICE40PLL(clk_pad, self.pll)
            else:
                m.submodules.clk_buf = clk_buf = io.Buffer("i", clk_pad)
                m.submodules.pll = pll = ECP5PLL(clk_buf.i, self.pll)
            m.d.comb += [clk.eq(pll.clk_out), locked.eq(pll.locked)]
            platform.add_clock_constraint(clk, self.clk_hz)
        m.d.comb += ClockSignal("sync").eq(clk)

        # -- reset: PLL lock, a button, and a power-on delay ----------------------------------
        m.domains.por = ClockDomain("por", reset_less=True, local=True)
        m.d.comb += ClockSignal("por").eq(ClockSignal("sync"))
        por = Signal(range(POR_CYCLES), name="por_count")
        with m.If(~locked):
            m.d.por += por.eq(0)
        with m.Elif(por != POR_CYCLES - 1):
            m.d.por += por.eq(por + 1)
        button = Const(0)
        if board.reset_button is not None:
            pin = platform.request(*board.reset_button, dir="-")
            m.submodules.button = button_buf = io.Buffer("i", pin)
            button = button_buf.i
        if board.family == "ecp5":
            # The synchronised reset reaches every flip-flop through a global network (a DCCA,
            # the clock's buffer): left to general routing, its branch to the far side of a 4x4
            # was the critical path (23.7 ns of wire at seed 3, docs/fpga.md).
            m.domains.reset = ClockDomain("reset", local=True)
            m.d.comb += ClockSignal("reset").eq(ClockSignal("sync"))
            m.submodules.reset_sync = ResetSynchronizer((por != POR_CYCLES - 1) | button,
                                                        domain="reset")
            m.submodules.reset_buf = Instance("DCCA", i_CLKI=ResetSignal("reset"), i_CE=Const(1),
                                              o_CLKO=ResetSignal("sync"))
        else:
            m.submodules.reset_sync = ResetSynchronizer((por != POR_CYCLES - 1) | button,
                                                        domain="sync")

        # -- the bridge on the UART -----------------------------------------------------------
        uart = platform.request("uart", 0, dir="-")
        m.submodules.uart_rx = rx = io.FFBuffer("i", uart.rx)
        m.submodules.uart_tx = tx = io.FFBuffer("o", uart.tx)
        bridge = m.submodules.bridge = MeshBridge(self.config, clk_hz=int(self.clk_hz),
                                                      baud=board.baud)
        m.d.comb += [bridge.rx.eq(rx.i), tx.o.eq(bridge.tx)]

        # -- LEDs -----------------------------------------------------------------------------
        beat = Signal(max(1, int(self.clk_hz).bit_length() - 1) + 1)
        m.d.sync += beat.eq(beat + 1)
        lights = {"heartbeat": beat[-1], "error": bridge.error, "busy": bridge.busy}
        for role, resource in board.leds.items():
            led = m.submodules[f"led_{role}"] = io.Buffer("o", platform.request(*resource,
                                                                                dir="-"))
            m.d.comb += led.o.eq(lights[role])
        return m


def _oscillator_hz(platform_class):
    """The frequency of the board's default clock resource."""
    for resource in platform_class.resources:
        if resource.name == platform_class.default_clk:
            return resource.clock.frequency
    raise ValueError(f"{platform_class.__name__} has no clock {platform_class.default_clk!r}")
