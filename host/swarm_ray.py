"""SwarmX's ``ray`` transport: one Ray actor per system, on a local Ray started here or the
cluster at ``address`` (the ``cluster`` extra; ``docs/host.md``). Ray must be at least
:data:`RAY_MIN_VERSION`, the first release with token authentication (``RAY_AUTH_MODE=token``;
later releases turn it on by default for a local ``ray.init``, and an explicit
``RAY_AUTH_MODE`` is left to Ray). A local Ray is started without a dashboard and with the
node's address 127.0.0.1, so that every one of its servers listens on the loopback interface
only; if Ray does not end up there, SwarmX shuts it down and refuses. An ``address`` where no
one listens is refused at once (:func:`check_ray_address`), not retried for minutes as Ray
would.
"""

import re
import socket

from .messages import SwarmError, encode
from .worker import MeshWorker

__all__ = ["RayLeaves", "RAY_MIN_VERSION", "check_ray_address", "check_ray_version",
           "ray_init_kwargs"]

#: The first Ray release with token authentication (``RAY_AUTH_MODE=token``): Ray 2.52.0.
RAY_MIN_VERSION = (2, 52, 0)
_LOOPBACK = "127.0.0.1"


def check_ray_version(version):
    """``SwarmError`` unless Ray ``version`` (a string) is at least :data:`RAY_MIN_VERSION`."""
    match = re.match(r"(\d+)\.(\d+)\.(\d+)", str(version))
    need = ".".join(map(str, RAY_MIN_VERSION))
    if match is None or tuple(int(g) for g in match.groups()) < RAY_MIN_VERSION:
        raise SwarmError(f"the ray transport needs Ray {need} or later (the first release with "
                         f"token authentication), not {version}: pip install 'ray>={need}'")


#: Seconds :func:`check_ray_address` waits for a cluster's address to accept a connection.
RAY_CONNECT_TIMEOUT = 10.0


def check_ray_address(address, timeout=RAY_CONNECT_TIMEOUT):
    """``SwarmError`` unless something listens at ``address`` (``host:port`` or
    ``ray://host:port``; other forms, such as ``auto``, are left to Ray): Ray itself retries
    an address where no one listens for minutes, printing log lines."""
    match = re.fullmatch(r"(ray://)?\[?([^\[\]/]+?)\]?:(\d+)", str(address).strip())
    if match is None:
        return
    host, port = match[2], int(match[3])
    if not 0 < port < 65536:
        raise SwarmError(f"--address {address}: the port must be in 1..65535, not {port}")
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as error:
        reason = "no answer" if isinstance(error, TimeoutError) else (error.strerror or error)
        raise SwarmError(f"no Ray cluster at --address {address}: {reason}") from None


def ray_init_kwargs(systems, address=None):
    """The arguments of ``ray.init`` for ``systems`` systems: a cluster at ``address``, or a
    local Ray on the loopback interface without a dashboard."""
    kwargs = {"address": address, "include_dashboard": False, "log_to_driver": False,
              "configure_logging": False}
    if address is None:
        kwargs |= {"num_cpus": max(2, systems), "_node_ip_address": _LOOPBACK}
    return kwargs


class RayLeaves:
    def __init__(self, n, worker, address):
        try:
            import ray
        except ImportError:
            raise SwarmError("the ray transport needs Ray: pip install 'wse-mini[cluster]'") \
                from None
        check_ray_version(ray.__version__)
        self.ray = ray
        self.started = not ray.is_initialized()
        if self.started:
            self._init(ray, n, address)
        actor = ray.remote(num_cpus=0)(_RayLeaf)
        self.actors = [actor.remote(worker, i) for i in range(n)]
        replies = ray.get([a.ping.remote() for a in self.actors])
        for i, r in enumerate(replies):
            if r is not True:
                self.close()
                raise SwarmError(f"system {i} did not start on Ray: {r}")

    @staticmethod
    def _init(ray, n, address):
        """Start a local Ray on the loopback interface (or join ``address``)."""
        kwargs = ray_init_kwargs(n, address)
        if address is not None:
            check_ray_address(address)
            ray.init(**kwargs)
            return
        # Ray turns a node address of 127.0.0.1 into the machine's own address unless it runs
        # as a single machine (its mode on macOS and Windows); ask for that mode while starting.
        from ray._private import ray_constants
        cluster = ray_constants.ENABLE_RAY_CLUSTER
        ray_constants.ENABLE_RAY_CLUSTER = False
        try:
            ray.init(**kwargs)
        finally:
            ray_constants.ENABLE_RAY_CLUSTER = cluster
        where = ray.util.get_node_ip_address()
        if where != _LOOPBACK:
            ray.shutdown()
            raise SwarmError(f"the local Ray came up on {where}, not on the loopback interface "
                             f"{_LOOPBACK}; refusing to serve on it (use --address for a "
                             f"cluster)")

    def call(self, messages):
        refs = {i: a.handle.remote(m) for i, (a, m) in enumerate(zip(self.actors, messages))
                if m is not None}
        replies = [None] * len(messages)
        for i, ref in refs.items():
            try:
                replies[i] = self.ray.get(ref)
            except self.ray.exceptions.RayError as error:
                replies[i] = encode({"error": f"Ray: {type(error).__name__}: {error}"})
        return replies

    def close(self):
        for a in getattr(self, "actors", []):
            try:
                self.ray.get(a.close.remote())
            except Exception:
                pass
        self.actors = []
        if self.started and self.ray.is_initialized():
            self.ray.shutdown()
            self.started = False


class _RayLeaf:
    """A Ray actor around a :class:`MeshWorker` (bytes in, bytes out)."""

    def __init__(self, worker, index):
        try:
            self.worker, self.error = MeshWorker(**worker, index=index), None
        except Exception as error:
            self.worker, self.error = None, f"{type(error).__name__}: {error}"

    def ping(self):
        return True if self.error is None else self.error

    def handle(self, data):
        return self.worker.handle(data)

    def close(self):
        if self.worker is not None:
            self.worker.close()

