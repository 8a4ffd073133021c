"""Board clocks: the PLL settings that turn a board's oscillator into the mesh's clock.

Plain Python that picks PLL parameters (:func:`ice40_pll`, :func:`ecp5_pll`) and two small
Amaranth blocks that instantiate them (:class:`ICE40PLL`, :class:`ECP5PLL`). The search is the
one ``icepll`` and ``ecppll`` do: the legal divider settings whose output is closest to the
request, within the VCO's range.
"""

from dataclasses import dataclass

from amaranth.hdl import Elaboratable, Instance, Module, Signal

__all__ = ["PLLSettings", "ice40_pll", "ecp5_pll", "ICE40PLL", "ECP5PLL"]


@dataclass(frozen=True)
class PLLSettings:
    """Divider settings of one PLL and the output frequency they give (``out_hz``)."""
    in_hz: float
    out_hz: float
    params: tuple     # ((name, value), ...) as the primitive wants them


def ice40_pll(in_hz, out_hz):
    """``SB_PLL40_*`` settings (``DIVR``, ``DIVF``, ``DIVQ``, ``FILTER_RANGE``) for ``out_hz``.

    iCE40 limits: PFD 10..133 MHz, VCO 533..1066 MHz, output 16..275 MHz.
    """
    if not 16e6 <= out_hz <= 275e6:
        raise ValueError(f"iCE40 PLL output must be in 16..275 MHz, not {out_hz / 1e6:g} MHz")
    best = None
    for divr in range(16):
        pfd = in_hz / (divr + 1)
        if not 10e6 <= pfd <= 133e6:
            continue
        for divf in range(128):
            vco = pfd * (divf + 1)
            if not 533e6 <= vco <= 1066e6:
                continue
            for divq in range(1, 7):
                out = vco / (1 << divq)
                if best is None or abs(out - out_hz) < abs(best[0] - out_hz):
                    best = (out, divr, divf, divq, pfd)
    if best is None:
        raise ValueError(f"no iCE40 PLL setting gives {out_hz / 1e6:g} MHz from "
                         f"{in_hz / 1e6:g} MHz")
    out, divr, divf, divq, pfd = best
    filter_range = next(i for i, f in enumerate((17e6, 26e6, 44e6, 66e6, 101e6), 1)
                        if pfd < f) if pfd < 101e6 else 6
    return PLLSettings(in_hz, out, (("DIVR", divr), ("DIVF", divf), ("DIVQ", divq),
                                    ("FILTER_RANGE", filter_range)))


def ecp5_pll(in_hz, out_hz):
    """``EHXPLLL`` settings (``CLKI_DIV``, ``CLKFB_DIV``, ``CLKOP_DIV``, ``CLKOP_CPHASE``).

    ECP5 limits: PFD 3.125..400 MHz, VCO 400..800 MHz, output 3.125..400 MHz; the feedback is
    taken from ``CLKOP``.
    """
    if not 3.125e6 <= out_hz <= 400e6:
        raise ValueError(f"ECP5 PLL output must be in 3.125..400 MHz, not {out_hz / 1e6:g} MHz")
    best = None
    for clki in range(1, 129):
        pfd = in_hz / clki
        if not 3.125e6 <= pfd <= 400e6:
            continue
        for clkfb in range(1, 81):
            out = pfd * clkfb
            for clkop in range(1, 129):
                vco = out * clkop
                # nearest output first, then the VCO nearest the middle of its range
                score = (abs(out - out_hz), abs(vco - 600e6))
                if 400e6 <= vco <= 800e6 and (best is None or score < best[0]):
                    best = (score, out, clki, clkfb, clkop)
    if best is None:
        raise ValueError(f"no ECP5 PLL setting gives {out_hz / 1e6:g} MHz from "
                         f"{in_hz / 1e6:g} MHz")
    _, out, clki, clkfb, clkop = best
    return PLLSettings(in_hz, out, (("CLKI_DIV", clki), ("CLKFB_DIV", clkfb),
                                    ("CLKOP_DIV", clkop), ("CLKOP_CPHASE", clkop - 1)))


class ICE40PLL(Elaboratable):
    """``SB_PLL40_PAD`` on the board's clock pad: ``clk_out`` and ``locked``.

    ``pad`` is the clock resource requested with ``dir="-"`` (the PLL takes the pad itself).
    """

    def __init__(self, pad, settings):
        self.pad = pad
        self.settings = settings
        self.clk_out = Signal()
        self.locked = Signal()

    def elaborate(self, platform):
        m = Module()
        params = {f"p_{name}": value for name, value in self.settings.params}
        m.submodules.pll = Instance(
            "SB_PLL40_PAD",
            p_FEEDBACK_PATH="SIMPLE", p_PLLOUT_SELECT="GENCLK",
            **params,
            i_PACKAGEPIN=self.pad.io, i_RESETB=1, i_BYPASS=0,
            o_PLLOUTGLOBAL=self.clk_out, o_LOCK=self.locked)
        return m


class ECP5PLL(Elaboratable):
    """``EHXPLLL`` from a clock signal: ``clk_out`` and ``locked``."""

    def __init__(self, clk_in, settings):
        self.clk_in = clk_in
        self.settings = settings
        self.clk_out = Signal()
        self.locked = Signal()

    def elaborate(self, platform):
        m = Module()
        params = {f"p_{name}": value for name, value in self.settings.params}
        m.submodules.pll = Instance(
            "EHXPLLL",
            p_PLLRST_ENA="DISABLED", p_INTFB_WAKE="DISABLED", p_STDBY_ENABLE="DISABLED",
            p_DPHASE_SOURCE="DISABLED", p_OUTDIVIDER_MUXA="DIVA", p_CLKOP_ENABLE="ENABLED",
            p_CLKOP_FPHASE=0, p_FEEDBK_PATH="CLKOP",
            **params,
            i_CLKI=self.clk_in, i_CLKFB=self.clk_out, i_RST=0, i_STDBY=0, i_PHASESEL0=0,
            i_PHASESEL1=0, i_PHASEDIR=1, i_PHASESTEP=1, i_PHASELOADREG=1, i_PLLWAKESYNC=0,
            i_ENCLKOP=0, o_CLKOP=self.clk_out, o_LOCK=self.locked,
            a_FREQUENCY_PIN_CLKI=f"{self.settings.in_hz / 1e6:g}",
            a_FREQUENCY_PIN_CLKOP=f"{self.settings.out_hz / 1e6:g}",
            a_ICP_CURRENT="12", a_LPF_RESISTOR="8")
        return m
