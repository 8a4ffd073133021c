"""``wse gemm``, ``wse bench gemm`` and ``wse export --mesh`` through click's CliRunner.

Everything runs on the golden backend except one Verilator bench on a 2x2 mesh.
"""

import json
import re

import numpy as np
import pytest
from click.testing import CliRunner

from wse.bench.gemm import prune, random_operands, sweep_gemm
from wse.fabric.compiler import compile_gemm
from wse.fabric.config import gemm_config
from wse.fabric.reference import gemm_reference
from wse.host.cli import main

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
BENCH_KEYS = {
    "cycles", "model_cycles", "ideal_cycles", "dense_cycles", "speedup_vs_dense", "ideal_speedup",
    "zeros_streamed_cycles", "utilisation", "psum_overhead_cycles_per_output", "bit_exact",
    "macs_issued", "macs_skipped_weight", "macs_skipped_act", "nnz", "mesh", "shape",
    "sparsity", "act_sparsity", "backend", "format", "limits", "compute_cycles", "io_cycles",
    "model_io_cycles", "speedup_with_io", "default_model_cycles",
}
SMALL = ["--mesh", "2x2", "--out-features", "12", "--in-features", "10", "--tokens", "6"]


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def operands(tmp_path):
    """``(W path, X path, W, X)``: a 70 % sparse 24x40 W and a 40x20 X on disk."""
    W0, X = random_operands(24, 40, 20, act_sparsity=0.2, seed=3)
    W = prune(W0, 0.7)
    np.save(tmp_path / "W.npy", W)
    np.save(tmp_path / "X.npy", X)
    return tmp_path / "W.npy", tmp_path / "X.npy", W, X


def reference(W, X, mesh, *, raw=False):
    config = gemm_config(mesh, W.shape[0], W.shape[1], X.shape[1], raw=raw)
    return gemm_reference(config, compile_gemm(config, W, X, raw=raw), X)[1 if raw else 0]


@pytest.mark.parametrize("raw", [False, True], ids=["requantised", "raw"])
def test_gemm_round_trip(operands, tmp_path, raw):
    w_path, x_path, W, X = operands
    out = tmp_path / "Y.npy"
    result = invoke("gemm", w_path, x_path, "-o", out, "--mesh", "2x3", "--backend", "golden",
                    *(["--raw"] if raw else []))
    assert result.exit_code == 0, result.output
    assert "golden model: no cycle count" in result.output
    assert "macs_issued" in result.output
    Y = np.load(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["W.npy", "X.npy", "Y.npy"]
    assert Y.dtype == (np.int32 if raw else np.int16)
    np.testing.assert_array_equal(Y, reference(W, X, (2, 3), raw=raw))


def test_gemm_compiles_once(operands, tmp_path, monkeypatch):
    """The program compiled before the System starts (bad operands fail at once) is the one the
    System runs: one compile with ``--no-tune``; tuned, every candidate is compiled before and
    the output says how many and what the tuner found."""
    from wse.fabric.program import GemmProgram

    built = []
    init = GemmProgram.__init__

    def counted(self, *args, **kwargs):
        init(self, *args, **kwargs)
        built.append((self.n_out, self.n_in))

    monkeypatch.setattr(GemmProgram, "__init__", counted)
    w_path, x_path, W, _ = operands
    result = invoke("gemm", w_path, x_path, "-o", tmp_path / "Y.npy", "--backend", "golden",
                    "--no-tune")
    assert result.exit_code == 0, result.output
    assert built == [W.shape]
    assert "program:" not in result.output
    built.clear()
    result = invoke("gemm", w_path, x_path, "-o", tmp_path / "Y.npy", "--backend", "golden")
    assert result.exit_code == 0, result.output
    assert f"program: the fastest of {len(built)} by the cycle model" in result.output
    assert len(built) > 1 and set(built) == {W.shape}


def big_mesh_gemm(tmp_path, mesh, backend, figure):
    """``wse gemm --raw`` of a 70 % sparse GEMM sized to ``mesh`` (two features a row, four
    tokens a column): the int32 totals must be numpy's ``W @ X`` exactly."""
    rows, cols = mesh
    W0, X = random_operands(2 * rows, 2 * rows, 4 * cols, act_sparsity=0.2, seed=rows)
    W = prune(W0, 0.7)
    np.save(tmp_path / "W.npy", W)
    np.save(tmp_path / "X.npy", X)
    result = invoke("gemm", tmp_path / "W.npy", tmp_path / "X.npy", "-o", tmp_path / "Y.npy",
                    "--mesh", f"{rows}x{cols}", "--backend", backend, "--raw")
    assert result.exit_code == 0, result.output
    np.testing.assert_array_equal(np.load(tmp_path / "Y.npy"), W @ X)
    figure(f"wse gemm --mesh {rows}x{cols} --backend {backend} --raw: {W.shape[0]}x"
           f"{W.shape[1]}x{X.shape[1]}, {np.count_nonzero(W)} nonzeros, equal to numpy's W @ X")


@pytest.mark.slow      # a Verilator build of its own, with tracing: about a minute
@pytest.mark.xdist_group("compiled")
def test_gemm_records_a_waveform_on_the_compiled_backend(operands, tmp_path, monkeypatch):
    w_path, x_path, W, X = operands
    monkeypatch.chdir(tmp_path)                 # a relative --waves is the caller's directory
    result = invoke("gemm", w_path, x_path, "-o", "Y.npy", "--mesh", "1x1", "--backend",
                    "verilator", "--waves", "run.fst")
    assert result.exit_code == 0, result.output
    assert "waveform: run.fst" in result.output
    assert (tmp_path / "run.fst").read_bytes()[:1] == b"\x00"        # an FST header block
    np.testing.assert_array_equal(np.load(tmp_path / "Y.npy"), reference(W, X, (1, 1)))
    result = invoke("gemm", w_path, x_path, "-o", "Y.npy", "--waves", "run.fst")
    assert result.exit_code == 2
    assert "--waves needs a simulated RTL backend (verilator, icarus, verilator-cocotb), not " \
           "golden" in result.output


@pytest.mark.parametrize("mesh", [(16, 16), (32, 32)], ids=["16x16", "32x32"])
def test_gemm_on_big_meshes_equals_numpy(tmp_path, mesh, figure):
    big_mesh_gemm(tmp_path, mesh, "golden", figure)


@pytest.mark.slow
@pytest.mark.xdist_group("compiled")
def test_gemm_on_a_16x16_compiled_mesh_equals_numpy(tmp_path, figure):
    big_mesh_gemm(tmp_path, (16, 16), "verilator", figure)


def test_gemm_grows_the_cores_to_fit(tmp_path):
    """40 tokens on 2 columns need n_tok 32 (default 8); 100 inputs on 1 row need n_feat 100."""
    W0, X = random_operands(6, 100, 40, seed=4)
    np.save(tmp_path / "W.npy", W0)
    np.save(tmp_path / "X.npy", X)
    result = invoke("gemm", tmp_path / "W.npy", tmp_path / "X.npy", "-o", tmp_path / "Y.npy",
                    "--mesh", "1x2")
    assert result.exit_code == 0, result.output
    assert gemm_config((1, 2), 6, 100, 40).n_tok == 32
    np.testing.assert_array_equal(np.load(tmp_path / "Y.npy"), reference(W0, X, (1, 2)))


def save(path, array):
    np.save(path, array)
    return path


def out_of_range(W):
    W = W.copy()
    W[0, 0] = 40_000
    return W


def text_file(path):
    path.write_text("X = [[1, 2]]\n")
    return path


# case: (mesh, message, (W path, X path) from (tmp_path, good W path, good X path, W, X))
BAD_INPUTS = {
    "missing": ("2x2", "'W.npy': File",
                lambda d, w, x, W, X: (d / "missing.npy", x)),
    "one_d": ("2x2", "W must be a 2-D array, not one of shape (5,)",
              lambda d, w, x, W, X: (save(d / "bad.npy", np.arange(5)), x)),
    "float": ("2x2", "W must hold integers, not float64 values",
              lambda d, w, x, W, X: (save(d / "bad.npy", W.astype(np.float64)), x)),
    "int16_range": ("2x2", "W must fit in the operand range of int16 (-32768..32767), not 40000",
                    lambda d, w, x, W, X: (save(d / "bad.npy", out_of_range(W)), x)),
    "mismatch": ("2x2", "shapes do not agree: W is 24x40, so X must have 40 rows",
                 lambda d, w, x, W, X: (w, save(d / "bad.npy", X[:30]))),
    "not_npy": ("2x2", "bad.npy is not a valid .npy array",
                lambda d, w, x, W, X: (w, text_file(d / "bad.npy"))),
    "too_big": ("1x1", "does not fit a 1x1 mesh: n_feat must be an integer in 1..4096",
                lambda d, w, x, W, X: (save(d / "w.npy", np.ones((1, 5000), dtype=np.int16)),
                                       save(d / "x.npy", np.ones((5000, 8), dtype=np.int16)))),
}


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_gemm_bad_inputs(operands, tmp_path, case):
    mesh, message, make = BAD_INPUTS[case]
    w_path, x_path = make(tmp_path, *operands)
    result = invoke("gemm", w_path, x_path, "-o", tmp_path / "Y.npy", "--mesh", mesh)
    assert result.exit_code != 0
    assert message in " ".join(result.output.split()), result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "Y.npy").exists()


@pytest.mark.parametrize("kwargs, message", [
    ({"tokens": 0}, "tokens must be a positive integer, not 0"),
    ({"out_features": 2.5}, "out_features must be a positive integer, not 2.5"),
    ({"sparsities": (0.5, 1.0)}, "sparsity must be a finite number at least 0 and below 1, "
                                 "not 1.0"),
    ({"act_sparsity": float("nan")}, "act_sparsity must be a finite number at least 0 and at "
                                     "most 1, not nan"),
])
def test_sweep_gemm_checks_its_arguments(kwargs, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        sweep_gemm(backend="golden", **kwargs)


def test_bench_gemm_golden_json():
    result = CliRunner().invoke(
        main, ["bench", "gemm", "--backend", "golden", "--json", "--sparsity", "0.75", *SMALL])
    assert result.exit_code == 0, result.output + result.stderr
    figures = json.loads(result.stdout)
    assert set(figures) == BENCH_KEYS
    assert figures["bit_exact"] is True
    assert figures["cycles"] is None and figures["utilisation"] is None
    assert figures["nnz"] == 30 and figures["shape"] == "12x10x6" and figures["mesh"] == "2x2"
    assert figures["ideal_speedup"] == 4.0
    assert figures["macs_skipped_weight"] == 0
    assert figures["io_cycles"] is None and figures["speedup_with_io"] is None
    assert figures["model_io_cycles"] > 0


def test_bench_gemm_sweep_writes_plot_and_json(tmp_path):
    result = CliRunner().invoke(
        main, ["bench", "gemm", "--backend", "golden", "--sweep", "--json",
               "--out", str(tmp_path), *SMALL])
    assert result.exit_code == 0, result.output + result.stderr
    points = json.loads(result.stdout)
    assert [p["sparsity"] for p in points] == [0, .25, .5, .75, .8, .85, .9, .95, .98, .99]
    assert all(p["bit_exact"] for p in points)
    assert (tmp_path / "gemm_sweep.png").read_bytes()[:8] == PNG_SIGNATURE
    assert json.loads((tmp_path / "gemm_sweep.json").read_text()) == points


def test_export_mesh(tmp_path):
    out = tmp_path / "f.v"
    result = CliRunner().invoke(main, ["export", "--mesh", "1x2", "-o", str(out)])
    assert result.exit_code == 0, result.output + result.stderr
    text = out.read_text()
    for needle in ("module wse_mesh", "s_axis_w0_tdata", "m_axis_s1_tready", "module wse_tile"):
        assert needle in text
    assert "intakes  s_axis_w0" in result.stderr
    assert "outlets  m_axis_s0, m_axis_s1" in result.stderr


def test_export_needs_mesh_or_subcommand(tmp_path):
    assert "give --mesh RxC" in invoke("export").output
    assert invoke("export", "--mesh", "1x2", "router").exit_code != 0
    assert "mesh must be ROWSxCOLS" in invoke("export", "--mesh", "4by4").output
    result = invoke("export", "router", "-o", tmp_path / "r.v", "--colors", 8)
    assert result.exit_code == 0, result.output
    assert "module router" in (tmp_path / "r.v").read_text()


@pytest.mark.xdist_group("compiled")      # the compiled model (the default RTL backend)
def test_bench_gemm_verilator(figure):
    result = CliRunner().invoke(
        main, ["bench", "gemm", "--mesh", "2x2", "--out-features", "16", "--in-features", "16",
               "--tokens", "16", "--backend", "verilator", "--json"])
    assert result.exit_code == 0, result.output + result.stderr
    figures = json.loads(result.stdout)
    assert set(figures) == BENCH_KEYS
    assert figures["bit_exact"] is True
    assert 0 < figures["utilisation"] <= 1
    assert figures["model_cycles"] <= figures["default_model_cycles"]      # tuned
    assert figures["cycles"] < min(figures["dense_cycles"], figures["zeros_streamed_cycles"])
    # every cycle counted: the load of X and the read of Y, as the io model predicts them
    assert figures["compute_cycles"] == figures["cycles"]
    assert figures["io_cycles"] == figures["model_io_cycles"] > 0
    assert 1 < figures["speedup_with_io"] < figures["speedup_vs_dense"]
    figure(f"wse bench gemm 2x2 16x16x16 s=0.9 verilator: {figures['cycles']} cycles (ideal "
           f"{figures['ideal_cycles']}, dense {figures['dense_cycles']}, zeros streamed "
           f"{figures['zeros_streamed_cycles']}), utilisation {figures['utilisation']}; "
           f"{figures['limits']}")


def test_gemm_on_a_board_through_its_serial_bridge(tmp_path):
    """``--backend board``: the iCEBreaker's cores, over pyserial to a Python model of the
    bridge's protocol (tests/test_bridge.py), bit-exact against the golden model."""
    from wse.fpga.boards import board, mesh_config

    from .test_bridge import BridgeModel, fake_bridge

    config = mesh_config(board("icebreaker"))
    rng = np.random.default_rng(5)
    W = rng.integers(-300, 300, (config.n_out, config.n_feat))     # as big as the board's
    W[rng.random(W.shape) < 0.5] = 0                                 # core holds (8 x 8 x 2)
    X = rng.integers(-300, 300, (config.n_feat, config.n_tok))
    np.save(tmp_path / "W.npy", W)
    np.save(tmp_path / "X.npy", X)
    with fake_bridge(BridgeModel(config, 16)) as url:
        result = CliRunner().invoke(main, [
            "gemm", str(tmp_path / "W.npy"), str(tmp_path / "X.npy"), "-o",
            str(tmp_path / "Y.npy"), "--backend", "board", "--board", "icebreaker", "--port",
            url, "--timeout", "10"])
    assert result.exit_code == 0, result.output + result.stderr
    want, _ = gemm_reference(config, compile_gemm(config, W, X), X)
    np.testing.assert_array_equal(np.load(tmp_path / "Y.npy"), want)


@pytest.mark.parametrize("args, message", [
    ([], "--backend board needs --board and --port"),
    (["--board", "icebreaker", "--port", "socket://127.0.0.1:1", "--timeout", "0.5"],
     "the board failed: cannot open the serial port 'socket://127.0.0.1:1'"),
])
def test_board_backend_errors_are_named(tmp_path, args, message):
    np.save(tmp_path / "W.npy", np.ones((2, 2), dtype=np.int16))
    np.save(tmp_path / "X.npy", np.ones((2, 1), dtype=np.int16))
    result = CliRunner().invoke(main, ["gemm", str(tmp_path / "W.npy"), str(tmp_path / "X.npy"),
                                       "-o", str(tmp_path / "Y.npy"), "--backend", "board", *args])
    assert result.exit_code in (1, 2)
    assert message in result.stderr
