"""``make regress``: a randomised sweep of GEMMs on the mesh RTL against the golden model.

Shapes, weight and activation sparsities, mesh sizes (square and not) and seeds are drawn per
seed; every result and counter is compared bit for bit (``check_gemm``). One simulator session
per (mesh, simulator) runs all of its GEMMs.
"""

import numpy as np
import pytest

from wse.fabric.config import MeshConfig

from .cocotb_checks import SIMS
from .test_mesh_cocotb import check_gemm, random_gemm, sessions

pytestmark = pytest.mark.slow

MESHES = [(1, 1), (1, 4), (3, 1), (2, 2), (2, 3), (3, 2), (4, 4)]
SPARSITIES = [0.0, 0.5, 0.8, 0.9, 0.95, 0.99]


@pytest.mark.parametrize("rows, cols", MESHES)
@pytest.mark.parametrize("sim", SIMS)
def test_random_gemm_sweep(sim, rows, cols, figure):
    config = MeshConfig(rows, cols, n_feat=24, n_tok=8, n_out=24)
    rtl, golden = sessions(config, sim)
    with rtl, golden:
        for seed in range(6):
            rng = np.random.default_rng(1000 * rows + 100 * cols + seed)
            n_in = int(rng.integers(1, rows * config.n_feat + 1))
            n_out = int(rng.integers(1, rows * config.n_out + 1))
            tokens = int(rng.integers(1, cols * config.n_tok + 1))
            sparsity = SPARSITIES[seed % len(SPARSITIES)]
            act = float(rng.choice([0.0, 0.3, 0.7]))
            W, X = random_gemm(rng, n_out, n_in, tokens, sparsity, act,
                               scale=int(rng.choice([300, 3000, 32768])))
            check_gemm(rtl, golden, W, X, figure, raw=bool(seed % 3 == 2),
                       balance=bool(seed % 2 == 0))
