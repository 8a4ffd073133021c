"""The mesh a training run builds (:func:`fabric.config.train_config`): cores that hold a whole
layer's activations for the batch shard, blocks only where the cores' memory cannot, said so
before training starts; a shard no column can hold is refused in one line."""

import json

import pytest
from click.testing import CliRunner

from wse.fabric.config import MeshConfig, train_config
from wse.host.cli import main


def test_the_default_model_keeps_the_default_cores_but_their_tokens_and_slots():
    """The default cores hold the default model; their tokens grow to a column's share of the
    widest layer's inputs (64 over 4 columns), the weight-gradient pass's tokens, so that
    pass runs in one block, and their slots to hold every resident value at once: the two
    layers' activations (16 + 16 a row), the loss's deltas (3) and the gradient pass's 8."""
    sizing = train_config((4, 4), (64, 64, 10), 32)
    assert sizing.config == MeshConfig(4, 4, n_feat=43, n_tok=16) and sizing.blocked == {}


def test_cores_grow_to_hold_the_widest_layer_and_the_shard():
    sizing = train_config((4, 4), (64, 512, 512, 10), 32)
    # n_feat: two regions of 128 slots (the activations of alternate layers), 3 for the loss's
    # deltas, 8 for the gradient pass's features; n_tok: half of 512 / 4, to fit them
    assert (sizing.config.n_feat, sizing.config.n_out, sizing.config.n_tok) == (267, 128, 64)
    assert sizing.blocked == {}
    # 25 tokens a column, 50 a row; two regions of 32 activations a row, 5 deltas, 50 features
    shard = train_config((2, 4), (64, 64, 10), 100)
    assert (shard.config.n_tok, shard.config.n_feat) == (32, 119)


def test_a_layer_the_cores_cannot_hold_runs_in_blocks_and_the_run_says_so():
    sizing = train_config((1, 1), (64, 512, 10), 1024)
    assert sizing.config.n_tok == 1024
    assert sizing.config.n_feat * 1024 <= 0x8000 and sizing.config.n_out * 1024 <= 0x7F00
    assert set(sizing.blocked) == {"fc0", "fc1"}
    assert sizing.blocked["fc1"].startswith("fc1 runs in blocks: 512 inputs > 1 rows x 32")


def test_a_shard_no_column_can_hold_is_refused_naming_the_numbers():
    with pytest.raises(ValueError, match="a batch shard of 8193 tokens does not fit the 1x2 "
                                         "mesh: its 2 columns hold at most 8192 tokens"):
        train_config((1, 2), (64, 10), 8193)


def test_wse_train_prints_the_blocked_layers_and_reports_them():
    result = CliRunner().invoke(main, ["train", "--mesh", "1x1", "--hidden", "512",
                                       "--steps", "1", "--batch", "1024", "--json"])
    assert result.exit_code == 0, result.output
    assert "note: fc0 runs in blocks" in result.output
    report = json.loads(result.output.splitlines()[-1])
    assert set(report["blocked_layers"]) == {"fc0", "fc1"}
    assert report["core"]["n_tok"] == 1024
    assert report["mesh_cycles"] == report["io_cycles"] + report["compute_cycles"]


def test_a_layer_wider_than_a_carriage_return_can_name_is_refused():
    with pytest.raises(ValueError, match=r"^layer fc1 \(64 inputs, 33554433 outputs\) cannot run "
                                         r"on the mesh even in blocks: a carriage return names "
                                         r"at most 33554432 outputs$"):
        train_config((4, 4), (10, 64, 2**25 + 1), 32)
