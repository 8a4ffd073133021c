"""``python -m wse.fpga.breakdown``: a small tile synthesised with every module kept, on the
ECP5 with the ULX3S's options (Yosys 0.70 stopped on the router module there until the script
was cut in two)."""

from wse.fabric.config import MeshConfig
from wse.fpga.boards import board
from wse.fpga.breakdown import tile_breakdown


def test_breakdown_names_every_block_of_a_tile(tmp_path):
    config = MeshConfig(1, 1, n_feat=8, n_tok=1, n_out=8, depth=2, acc_buffers=2, psum_depth=2)
    figures = tile_breakdown(config, "ecp5", tmp_path, synth_opts=board("ulx3s-85f").synth_opts)
    names = {module.removeprefix("wse_tile.") for module in figures}
    assert {"router", "router.crossbar", "router.allocator", "router.route_state", "core",
            "core.acc", "core.sorter.cmd_fifo"} <= names
    assert {f"router.input_{port}" for port in "ensw"} <= names
    for module in ("router.crossbar", "router.input_e", "core.acc"):
        assert figures[f"wse_tile.{module}"]["luts"] > 0, module
    # LUT RAM: the queues and the route copies, four LUT4 places each
    assert figures["wse_tile.router.input_e"]["lutram"] > 0
    assert figures["wse_tile.router.route_state"]["lutram"] > 0
    assert sum(f["dsps"] for f in figures.values()) == 1
    for f in figures.values():
        assert f["luts"] >= 4 * f["lutram"]


def test_a_failing_yosys_is_a_build_error_naming_its_log(tmp_path, monkeypatch):
    import pytest

    from wse.fpga import breakdown
    from wse.fpga.build import BuildError

    monkeypatch.setattr(breakdown, "tool_environment",
                        lambda: {"YOSYS": "false", "PATH": "/usr/bin:/bin"})
    with pytest.raises(BuildError, match="Yosys failed on the tile's breakdown .*breakdown.log"):
        tile_breakdown(MeshConfig(1, 1), "ecp5", tmp_path)
