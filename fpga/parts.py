# amaranth: UnusedElaboratable=no
"""Parts out of context: the router or the tile synthesised alone, and what each costs.

:func:`build_part` exports one part's Verilog, synthesises it with Yosys (``synth_ecp5`` or
``synth_ice40 -dsp``) and places and routes it with nextpnr ``--out-of-context`` (no I/O cells,
every port an internal net) at a 100 MHz constraint, once per placer seed, one seed after the
other. It is the flow the peers' routers were measured with (``docs/fpga.md``), so the figures
compare. ``nextpnr-ice40`` has no ``--out-of-context``: for the iCE40, Yosys takes the port
status off every port but the clock after synthesis, which leaves nextpnr the same netlist
without I/O cells (the clock's one pad aside). Everything a build writes stays in
``<out>/parts/<part>-<device>/``.

The parts:

- ``router``: :class:`~rtl.router.Router` with :data:`ROUTER_PARAMS` (24 colors, 2 queues,
  2 deep: the shape the peers were measured in), top module :data:`ROUTER_MODULE`;
- ``tile``: the mesh's shared tile module :data:`~fabric.mesh.TILE_MODULE` (routes, colors and
  row are straps, i.e. inputs) with the core of the board that carries the device
  (:data:`DEVICES`), as a mesh build instantiates it, and mapped as that board's builds map
  it (:func:`~fpga.build.before_lut_mapping`: the ECP5's 4:1 multiplexers).
"""

import json
import shlex
import time
from dataclasses import dataclass
from pathlib import Path

from amaranth.back import verilog

from wse.fabric.mesh import TILE_MODULE, Mesh
from wse.rtl import validate
from wse.rtl.numfmt import number_format
from wse.rtl.router import Router

from .boards import board as find_board
from .boards import mesh_config
from .build import DEFAULT_OUT, BuildError, run_script, synth_script, tool_environment
from .report import cell_counts, fit_error, nextpnr_report, source_commit, tool_versions

__all__ = ["DEFAULT_SEEDS", "DEVICES", "Device", "FREQ_MHZ", "PARTS", "ROUTER_MODULE",
           "ROUTER_PARAMS", "build_part", "parse_seeds", "part_figures", "part_verilog",
           "seed_result"]

#: The parts ``wse build --part`` takes.
PARTS = ("router", "tile")
#: The router's parameters: 5 ports, 38-bit wavelets, 2-deep buffers, as the peers measured,
#: without U-turns as a mesh tile's router (a color plan never routes back; none of the
#: peers turns back either); docs/fpga.md also gives the figures of ``Router``'s default,
#: with U-turns.
ROUTER_PARAMS = {"n_colors": 24, "n_queues": 2, "depth": 2, "u_turns": False}
#: Verilog module name of the router built alone.
ROUTER_MODULE = "wse_router"
#: nextpnr's clock constraint (MHz): the same for every part and device, as for the peers.
FREQ_MHZ = 100
DEFAULT_SEEDS = (1, 2, 3)


@dataclass(frozen=True)
class Device:
    """A device parts are built for.

    Parameters
    ----------
    name : str
        The name ``wse build --device`` takes.
    family : str
        ``"ecp5"`` or ``"ice40"`` (how cells are counted, :data:`fpga.report.CELLS`).
    board : str
        The board (:data:`fpga.boards.BOARDS`) whose core configuration a tile gets.
    synth : str
        The Yosys synthesis command, without ``-top`` and ``-json``.
    nextpnr : str
        The ``sim/toolchain.env`` variable naming nextpnr for this family.
    nextpnr_args : tuple of str
        nextpnr's device and package options.
    out_of_context : bool
        Whether this nextpnr has ``--out-of-context``; if not, every port but ``clk`` is made
        an internal net in Yosys (see the module docstring).
    """
    name: str
    family: str
    board: str
    synth: str
    nextpnr: str
    nextpnr_args: tuple
    out_of_context: bool


DEVICES = {
    "ecp5-85f": Device("ecp5-85f", "ecp5", "ulx3s-85f", "synth_ecp5", "NEXTPNR_ECP5",
                       ("--85k", "--package", "CABGA381"), out_of_context=True),
    "up5k": Device("up5k", "ice40", "icebreaker", "synth_ice40 -dsp", "NEXTPNR_ICE40",
                   ("--up5k", "--package", "sg48"), out_of_context=False),
}


def _choice(what, value, names):
    if value not in names:
        raise ValueError(f"{what} must be one of {', '.join(names)}, not {value!r}")
    return value


def parse_seeds(text):
    """``"1,2,3"`` -> ``(1, 2, 3)``: distinct non-negative integers, or a ``ValueError``."""
    words = [w.strip() for w in str(text).split(",")]
    try:
        seeds = tuple(validate.count("seed", int(w), 0) for w in words)
    except ValueError:
        raise ValueError(f"seeds must be a comma-separated list of non-negative integers, "
                         f"not {text!r}") from None
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct, not {text!r}")
    return seeds


def part_verilog(part, device, mesh=None, params=None):
    """``(top, verilog, params)`` of ``part`` for ``device``: its top module's name, its Verilog
    and the parameters it was made with (the router's, or the tile's mesh configuration).
    ``mesh = (rows, cols)`` picks the mesh whose tile it is (the board's default mesh if not
    given; the row strap's width depends on the rows); the router takes none. ``params``
    changes the router's parameters (:data:`ROUTER_PARAMS`) or the tile's core parameters
    (:class:`~fabric.config.MeshConfig` fields, over the board's)."""
    _choice("part", part, PARTS)
    dev = DEVICES[_choice("device", device, tuple(DEVICES))]
    params = dict(params or {})
    tool_environment()      # Amaranth's Verilog back end runs the toolchain's Yosys
    if part == "router":
        if mesh is not None:
            raise ValueError("mesh applies to the tile only, not the router")
        params = {**ROUTER_PARAMS, **params}
        text = verilog.convert(Router(**params), name=ROUTER_MODULE, emit_src=False)
        return ROUTER_MODULE, text, params
    config = mesh_config(find_board(dev.board), *(mesh or (None, None)), **params)
    text = Mesh(config).verilog_dependencies()   # never elaborated (the first line: no warning)
    params = {k: v for k, v in config.to_dict().items() if k not in ("rows", "cols")}
    params["mesh"] = f"{config.rows}x{config.cols}"
    return TILE_MODULE, text, params


def part_figures(stat, family):
    """``{"luts", "lut4_cells", "ffs", "lutram", "brams", "dsps"}`` from Yosys ``stat -json``.

    ``luts`` counts LUT4 logic: on the ECP5 ``LUT4`` plus two per carry cell (``CCU2C``);
    ``lut4_cells`` the plain LUT4 cells alone (``LUT4`` / ``SB_LUT4``), as the peers' figures
    in ``docs/fpga.md`` are counted;
    ``lutram`` counts distributed-RAM cells (``TRELLIS_DPR16X4``, 16x4 bits each; none on the
    iCE40), which are not in ``luts``. (A mesh build's ``luts`` counts each as 4 LUT4 places.)
    """
    counts = cell_counts(stat, family)
    plain = counts["cells"].get("LUT4" if family == "ecp5" else "SB_LUT4", 0)
    return {"luts": counts["logic_luts"], "lut4_cells": plain, "ffs": counts["ffs"],
            "lutram": counts["lutram"],
            "brams": counts["brams"], "dsps": counts["dsps"]}


def seed_result(report):
    """``(fmax_mhz, utilisation)`` of one seed from nextpnr's ``--report`` JSON: the achieved
    frequency of the limiting clock (``None`` if nextpnr timed none)."""
    fmax, _, utilisation = nextpnr_report(report)
    return (None if fmax is None else round(fmax, 2)), utilisation


def _run(argv, build_dir, env, name, deadline):
    """Run one tool through a script in ``build_dir`` (its output in ``<name>.out``)."""
    script = build_dir / f"{name}.sh"
    script.write_text(shlex.join(argv) + "\n")
    timeout = None if deadline is None else max(deadline - time.monotonic(), 0.001)
    return run_script(script.name, build_dir, env, timeout, build_dir / f"{name}.out")


def _last_words(path):
    lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    return lines[-1] if lines else "see the log"


def build_part(part, device, *, seeds=DEFAULT_SEEDS, out=DEFAULT_OUT, mesh=None, params=None,
               timeout=None):
    """Synthesise ``part`` (``"router"`` or ``"tile"``) for ``device`` alone and report its cost.

    Runs Yosys once, then nextpnr once per seed in ``seeds``, sequentially; ``timeout`` bounds
    the whole in seconds; ``mesh`` and ``params`` as for :func:`part_verilog`.

    Returns a dict: ``part``, ``device``, ``params`` (what was built), ``luts``, ``ffs``,
    ``lutram``, ``brams``, ``dsps`` (:func:`part_figures`), ``seeds``, ``fmax_mhz`` (one per
    seed), ``fmax_mhz_min``, ``fmax_mhz_max``, ``fits`` and ``fit_error`` (a part larger than
    the device stops at nextpnr's utilisation check: the resource, used against available; its
    fmax figures are ``None``), ``utilisation`` (nextpnr's, the last seed's), ``tools`` and
    ``commit`` (as :func:`~fpga.build.build` reports them), ``seconds`` and ``build_dir``.
    Raises ``ValueError`` for bad arguments and :class:`~fpga.build.BuildError`
    when a tool fails otherwise.
    """
    seeds = parse_seeds(seeds if isinstance(seeds, str) else ",".join(map(str, seeds)))
    top, text, params = part_verilog(part, device, mesh, params)
    dev = DEVICES[device]
    suffix = "-bf16" if number_format(params.get("fmt")).is_float else ""
    build_dir = Path(out) / "parts" / f"{part}-{device}{suffix}"
    build_dir.mkdir(parents=True, exist_ok=True)
    for stale in build_dir.glob("*.json"):
        stale.unlink()
    env = tool_environment()
    commit = source_commit()
    started = time.monotonic()
    deadline = None if timeout is None else started + timeout
    where = f"{part} on {device}"

    (build_dir / f"{top}.v").write_text(text)
    # The tile, made with a board's configuration, is mapped as that board's builds map it
    # (the ECP5's 4:1 multiplexers, fpga.build.before_lut_mapping); the router is the peers'
    # flow, synth_<family> alone.
    files, stop, after = synth_script(dev.family, f"{dev.synth} -top {top}") \
        if part == "tile" else ({}, "", [])
    for name, fixup in files.items():
        (build_dir / name).write_text(fixup)
    unport = "" if dev.out_of_context else \
        f"delete -port {top}/x:* {top}/w:clk %d\nwrite_json {top}.json\n"
    (build_dir / "synth.ys").write_text("\n".join([
        f"read_verilog {top}.v", f"{dev.synth} -top {top} {stop}".strip(), *after,
        f"write_json {top}.json", "tee -q -o stat.json stat -json", unport]))
    if _run([env["YOSYS"], "-q", "-l", "synth.log", "synth.ys"], build_dir, env, "synth",
            deadline):
        raise BuildError(f"{where}: Yosys failed ({_last_words(build_dir / 'synth.out')}; "
                         f"log: {build_dir / 'synth.log'})")
    figures = part_figures(json.loads((build_dir / "stat.json").read_text()), dev.family)

    fmax, utilisation, error = [], {}, None
    for seed in seeds:
        argv = [env[dev.nextpnr], *dev.nextpnr_args, "--freq", str(FREQ_MHZ),
                *(("--out-of-context",) if dev.out_of_context else ()),
                "--timing-allow-fail", "--seed", str(seed),
                "--json", f"{top}.json", "--report", f"report-{seed}.json",
                "--log", f"nextpnr-{seed}.log", "--quiet"]
        if _run(argv, build_dir, env, f"nextpnr-{seed}", deadline):
            log = build_dir / f"nextpnr-{seed}.log"
            error = fit_error(log.read_text()) if log.exists() else None
            if error is not None and "used" in error:
                break       # the device is too small whatever the seed
            raise BuildError(f"{where}: nextpnr failed with seed {seed} "
                             f"({error or _last_words(build_dir / f'nextpnr-{seed}.out')}; "
                             f"log: {log})")
        seed_fmax, utilisation = seed_result(
            json.loads((build_dir / f"report-{seed}.json").read_text()))
        fmax.append(seed_fmax)

    timed = [f for f in fmax if f is not None]
    result = {
        "part": part,
        "device": device,
        "params": params,
        **figures,
        "seeds": list(seeds),
        "fmax_mhz": fmax if error is None else [None] * len(seeds),
        "fmax_mhz_min": min(timed) if timed and error is None else None,
        "fmax_mhz_max": max(timed) if timed and error is None else None,
        "fits": error is None,
        "fit_error": error,
        "utilisation": utilisation,
        "tools": tool_versions(env["YOSYS"], env[dev.nextpnr]),
        "commit": commit,
        "seconds": round(time.monotonic() - started, 1),
        "build_dir": str(build_dir),
    }
    (build_dir / "build.json").write_text(json.dumps(result, indent=2) + "\n")
    return result
