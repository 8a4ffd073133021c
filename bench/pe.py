"""``wse bench pe``: what a weight and a carriage return cost one tile's core, measured in RTL."""

import json
import tempfile
import time
from pathlib import Path

from wse.rtl.numfmt import number_format
from wse.sim.tile_run import BENCH_MODULE, run_tile_tests

__all__ = ["bench_pe"]


def bench_pe(*, sim="verilator", lanes=4, tokens=32, weights=400, seed=1, fmt=None):
    """Run the tile benchmark testbench in number format ``fmt`` (int16 by default); returns its
    figures as a dict (``RuntimeError`` if the testbench failed, with its messages)."""
    fmt = number_format(fmt)
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "figures.json"
        start = time.monotonic()
        result = run_tile_tests(sim=sim, module=BENCH_MODULE, testcase="pe_figures", seed=seed,
                                extra_env={"WSE_BENCH_OUT": str(out)}, lanes=lanes,
                                n_tok=tokens, n_feat=16, n_out=8, weights=weights,
                                fmt=fmt)
        if not result.passed:
            raise RuntimeError(f"pe bench failed on {sim}: {result.failures}; "
                               f"log: {result.test_dir / 'sim.log'}")
        figures = json.loads(out.read_text())
    figures.update(simulator=sim, seed=seed, wall_seconds=round(time.monotonic() - start, 1))
    return figures
