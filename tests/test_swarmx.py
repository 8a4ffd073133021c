"""SwarmX: the tree, exact reduction, bytes per link, and the transports agreeing."""

import math

import numpy as np
import pytest

from wse.fabric import numerics
from wse.fabric.config import MeshConfig
from wse.host.layer_stream import LayerStream
from wse.host.messages import decode, encode, size
from wse.host.numbers import exact, exact_float, exact_sum, normalise
from wse.host.swarm_ray import check_ray_version, ray_init_kwargs
from wse.host.swarmx import SwarmError, SwarmX, Tree
from wse.rtl.numfmt import FixedPoint


@pytest.mark.parametrize("n, k, depth, links", [
    (1, 2, 0, 1), (2, 2, 1, 3), (3, 2, 2, 6), (4, 2, 2, 7), (5, 2, 3, 11), (4, 4, 1, 5),
    (9, 3, 2, 13)])
def test_tree_shape(n, k, depth, links):
    tree = Tree(n, k)
    assert (tree.depth, tree.links) == (depth, links)
    assert len(tree.levels[-1]) == 1


@pytest.mark.parametrize("n, k", [(1, 2), (4, 2), (5, 2), (7, 3)])
def test_reduce_is_the_exact_sum(n, k):
    rng = np.random.default_rng(n)
    parts = [{"g": rng.integers(-2**40, 2**40, 50)} for _ in range(n)]
    assert np.array_equal(Tree(n, k).reduce(parts)["g"], sum(p["g"] for p in parts))


@pytest.mark.parametrize("n, k", [(2, 2), (5, 2), (7, 3)])
def test_reduce_of_bf16_exact_sums_does_not_depend_on_the_tree(n, k):
    """bf16: each system sends its binary32 totals as exact sums; the tree adds them exactly, so
    the root's sum is the sum of the systems' values, whatever the fan-out."""
    rng = np.random.default_rng(n)
    values = (rng.normal(size=(n, 50)) * 2.0 ** rng.integers(-100, 100, (n, 50)))
    bits = numerics.from_float32(values.astype(np.float32))
    parts = [{"dW": exact(b)} for b in bits]
    total = normalise(Tree(n, k).reduce(parts)["dW"])
    assert np.array_equal(total, exact_sum(bits.T, axis=1))
    assert np.array_equal(total, normalise(Tree(n, k + 1).reduce(parts[::-1])["dW"]))
    assert exact_float(total).tolist() == [math.fsum(c) for c in values.astype(np.float32).T]


@pytest.mark.parametrize("make, message", [
    (lambda: Tree(0), "systems must be a positive integer, not 0"),
    (lambda: Tree(2, 1), "fanout must be an integer of at least 2, not 1"),
    (lambda: SwarmX(1, transport="mpi"), "transport must be one of inproc, process, ray"),
])
def test_bad_parameters_are_named(make, message):
    with pytest.raises(ValueError) as info:
        make()
    assert message in str(info.value)


def test_message_codec_round_trip_and_refuses_objects():
    msg = {"op": "x", "n": 3, "a": np.arange(6, dtype=np.int16).reshape(2, 3),
           "b": np.array([True, False])}
    back = decode(encode(msg))
    assert back["op"] == "x" and back["n"] == 3
    assert back["a"].dtype == np.int16 and np.array_equal(back["a"], msg["a"])
    with pytest.raises(ValueError, match="only numeric arrays travel"):
        encode({"a": np.array(["s"], dtype=object)})


def test_a_nested_message_travels_inside_its_message_not_as_bytes():
    """A dict holding arrays (a layer's stream in a request) is part of the one message: its
    arrays are the message's, encoded once; ``size`` is the encoding's length."""
    inner = {"name": "fc0", "shape": [2, 3], "values": np.arange(6, dtype=np.int16)}
    msg = {"op": "forward", "stream": inner, "x": np.ones((2, 2)), "meta": {"k": 1}}
    data = encode(msg)
    assert len(data) == size(msg) and size(inner) == len(encode(inner))
    assert data.count(inner["values"].tobytes()) == 1 and b"uint8" not in data
    back = decode(data)
    assert back["meta"] == {"k": 1} and back["stream"]["name"] == "fc0"
    assert back["stream"]["values"].dtype == np.int16
    assert np.array_equal(back["stream"]["values"], inner["values"])


def _layer(seed=0):
    rng = np.random.default_rng(seed)
    W = rng.normal(scale=0.3, size=(6, 8))
    mask = rng.random(W.shape) < 0.5
    return LayerStream.from_dense("fc0", FixedPoint(), W, mask, rng.normal(size=6))


def _forward(swarm, x):
    s = _layer()
    shards = np.array_split(np.arange(x.shape[1]), swarm.systems)
    replies = swarm.broadcast(s, [
        {"op": "forward", "layer": 0, "last": True, "x": x[:, sh]} for sh in shards])
    return s, np.concatenate([r["y"] for r in replies], axis=1), replies


@pytest.mark.parametrize("transport", ["inproc", "process"])
def test_a_broadcast_forward_is_the_same_on_every_split(transport):
    config = MeshConfig(1, 2, n_feat=8, n_tok=4, n_out=8).to_dict()
    x = np.random.default_rng(5).integers(0, 256, (8, 12))
    with SwarmX(1, worker={"config": config}) as one:
        _, want, _ = _forward(one, x)
    with SwarmX(3, transport=transport, worker={"config": config}) as three:
        s, got, replies = _forward(three, x)
        stats = three.stats()
    assert np.array_equal(got, want)
    assert all(r["cycles"]["forward"] > 0
               and r["dense_cycles"]["forward"] >= r["cycles"]["forward"] for r in replies)
    assert stats["broadcast_bytes_per_link"] == s.nbytes == len(encode(s.fields()))
    assert (stats["tree_depth"], stats["links"]) == (2, 6)


def test_a_failing_system_is_named():
    config = MeshConfig(1, 1, n_feat=8, n_tok=4, n_out=8).to_dict()
    with SwarmX(2, worker={"config": config}) as swarm:
        with pytest.raises(SwarmError, match="system 0: ValueError: layer 0 needs the input"):
            swarm.broadcast(_layer(), [{"op": "forward", "layer": 0, "last": True}] * 2)


# -- Ray ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("version, ok", [("2.52.0", True), ("2.60.0", True), ("3.0.0rc1", True),
                                         ("2.51.2", False), ("2.9.3", False), ("dev", False)])
def test_ray_needs_the_release_with_token_authentication(version, ok):
    if ok:
        check_ray_version(version)
        return
    with pytest.raises(SwarmError) as info:
        check_ray_version(version)
    assert str(info.value) == (f"the ray transport needs Ray 2.52.0 or later (the first release "
                               f"with token authentication), not {version}: pip install "
                               f"'ray>=2.52.0'")


def test_an_old_ray_is_refused_before_it_starts(monkeypatch):
    import ray
    monkeypatch.setattr(ray, "__version__", "2.40.0")
    with pytest.raises(SwarmError, match="needs Ray 2.52.0 or later"):
        SwarmX(1, transport="ray", worker={"config": MeshConfig(1, 1).to_dict()})
    assert not ray.is_initialized()


def test_a_local_ray_listens_on_loopback_only_and_a_cluster_is_joined_as_given():
    local = ray_init_kwargs(3)
    assert local["_node_ip_address"] == "127.0.0.1" and local["include_dashboard"] is False
    assert local["address"] is None and local["num_cpus"] == 3
    remote = ray_init_kwargs(3, "10.0.0.5:6379")
    assert remote["address"] == "10.0.0.5:6379" and "_node_ip_address" not in remote
    assert remote["include_dashboard"] is False and "num_cpus" not in remote


def _listening(process):
    """The inet addresses ``process`` and its descendants listen on."""
    import psutil
    found = []
    for p in (process, *process.children(recursive=True)):
        try:
            found += [(p.name(), c.laddr.ip) for c in p.net_connections(kind="inet")
                      if c.status == psutil.CONN_LISTEN]
        except psutil.Error:
            pass
    return found


def test_the_local_ray_serves_on_loopback_only():
    """A local Ray started by SwarmX: every server of it (GCS, raylet, workers, this driver)
    listens on 127.0.0.1 only, and the forward pass is the in-process one."""
    import psutil
    import ray
    if ray.is_initialized():
        pytest.skip("a Ray is already running in this process")
    config = MeshConfig(1, 2, n_feat=8, n_tok=4, n_out=8).to_dict()
    x = np.random.default_rng(5).integers(0, 256, (8, 12))
    with SwarmX(1, worker={"config": config}) as one:
        _, want, _ = _forward(one, x)
    with SwarmX(2, transport="ray", worker={"config": config}) as swarm:
        _, got, _ = _forward(swarm, x)
        sockets = _listening(psutil.Process())
    assert np.array_equal(got, want)
    assert {name for name, _ in sockets} >= {"gcs_server", "raylet"}
    assert all(ip in ("127.0.0.1", "::ffff:127.0.0.1", "::1") for _, ip in sockets), sockets
    assert not ray.is_initialized()
