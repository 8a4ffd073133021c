# amaranth: UnusedElaboratable=no
"""Where a tile's logic goes: Yosys cell counts per module of the shared tile.

A mesh build's report says only what the whole design costs (a 1x1 mesh is flattened; a larger
one keeps the tile module but not the tile's own submodules). :func:`tile_breakdown`
synthesises the mesh's one tile module (``wse_tile``, straps as inputs) without flattening
anything and counts each module's own cells, which names the blocks worth making cheaper. The
straps are not constants here, so the totals are somewhat above a flattened tile's share of a
mesh build.
"""

import json
import subprocess
from pathlib import Path

from wse.fabric.mesh import TILE_MODULE, Mesh

from .build import BuildError, before_lut_mapping, tool_environment
from .report import CELLS

__all__ = ["main", "tile_breakdown"]

_SYNTH = {"ice40": "synth_ice40", "ecp5": "synth_ecp5"}


def tile_breakdown(config, family, out, synth_opts=""):
    """``{module: {"luts", "lutram", "ffs", ...}}`` of ``config``'s tile for ``family``, each
    module's own cells (submodules excluded) counted as :data:`~fpga.report.CELLS` says
    (``luts``: LUT4 places, an ECP5 distributed RAM cell 4 of them; ``lutram``: those cells),
    synthesised with ``synth_opts`` (a board's :attr:`~fpga.boards.Board.synth_opts`). Writes
    the Verilog, script and log to ``out``."""
    env = tool_environment()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    mesh = Mesh(config)     # never elaborated (the first line: no warning for it)
    (out / f"{TILE_MODULE}.v").write_text(mesh.verilog_dependencies())
    # Two runs of the script with the unused wires purged between them: kept in one piece,
    # Yosys 0.70's ABC9 stops on the router module (``Assert `count_id(wire->name) == 0'
    # failed`` while it puts the mapped LUTs back) when nothing is flattened.
    # Between them, the build's own steps before LUT mapping (the ECP5's 4:1 multiplexers).
    synth = f"{_SYNTH[family]} {synth_opts} -noflatten -top {TILE_MODULE}"
    files, steps = before_lut_mapping(family)
    for name, text in files.items():
        (out / name).write_text(text)
    (out / "breakdown.ys").write_text("\n".join([
        f"read_verilog {TILE_MODULE}.v", f"{synth} -run :map_luts", "opt_clean -purge",
        *steps, f"{synth} -run map_luts:", "tee -q -o breakdown.json stat -json", ""]))
    done = subprocess.run([env["YOSYS"], "-q", "-l", "breakdown.log", "breakdown.ys"], cwd=out,
                          env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise BuildError(f"Yosys failed on the tile's breakdown ({last}; log: "
                         f"{out / 'breakdown.log'})")
    stat = json.loads((out / "breakdown.json").read_text())
    kinds = CELLS[family]
    result = {}
    for module, counts in stat["modules"].items():
        cells = counts.get("num_cells_by_type", {})
        figures = {figure: sum(cells.get(name, 0) * weight for name, weight in table.items())
                   for figure, table in kinds.items() if isinstance(table, dict)}
        figures["ffs"] = sum(n for name, n in cells.items() if name.startswith(kinds["ffs"]))
        result[module.lstrip("\\")] = figures
    return result


def main(argv=None):
    """``python -m wse.fpga.breakdown [BOARD [RxC]] [--json]``: the table, or with ``--json``
    one object: ``board``, ``mesh``, ``modules`` (:func:`tile_breakdown`), ``tools`` and
    ``commit`` (as :func:`~fpga.build.build` reports them) and ``seconds``."""
    import sys
    import time

    from wse.fabric.config import parse_mesh
    from wse.fpga.boards import board, mesh_config

    from .report import source_commit, tool_versions

    args = list(sys.argv[1:] if argv is None else argv)
    as_json = "--json" in args
    args = [a for a in args if a != "--json"]
    started = time.monotonic()
    try:
        b = board(args[0] if args else "icebreaker")
        rows, cols = parse_mesh(args[1] if len(args) > 1 else "1x1")
        commit = source_commit()
        figures = tile_breakdown(mesh_config(b, rows, cols), b.family, synth_opts=b.synth_opts,
                                 out=Path("build/fpga/breakdown") / f"{b.name}-{rows}x{cols}")
    except (ValueError, BuildError) as error:
        sys.exit(f"breakdown: {error}")
    if as_json:
        env = tool_environment()
        nextpnr = env["NEXTPNR_ECP5" if b.family == "ecp5" else "NEXTPNR_ICE40"]
        print(json.dumps({"board": b.name, "mesh": f"{rows}x{cols}", "modules": figures,
                          "tools": tool_versions(env["YOSYS"], nextpnr), "commit": commit,
                          "seconds": round(time.monotonic() - started, 1)}))
        return
    for module, f in sorted(figures.items(), key=lambda kv: -kv[1]["luts"]):
        print(f"{f['luts']:7d} LUT {f['lutram']:4d} LUT-RAM {f['ffs']:6d} FF {f['brams']:3d} BRAM "
              f"{f['dsps']:2d} DSP  {module}")


if __name__ == "__main__":
    main()
