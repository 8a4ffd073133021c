"""SwarmX: a tree of fan-out ``k`` over ``N`` systems that broadcasts weights down and sums
gradients up (``docs/host.md``).

The tree is built from the leaves up: systems in groups of ``k`` under a SwarmX node, nodes in
groups of ``k`` under the next, up to one node, whose up-link goes to MemoryX. A broadcast sends
a layer's stream once over every link; a reduce sends each node's sum once over its up-link,
summing its children in order (pairwise for ``k = 2``). Gradient totals are ``int64`` fixed
point, so the sums are exact and do not depend on the tree: 1, 2 or 4 systems train to the
same bits. In bf16 they are exact sums of binary32 values (:func:`host.numbers.exact`: ``int64``
digits, added the same way), so the tree adds nothing that depends on its shape; what each
system sends is its mesh's binary32 sum over its own tokens, which does depend on the split
(``docs/host.md``, "bf16").

Transports (:data:`TRANSPORTS`) carry the same byte messages (:mod:`host.messages`) to
:class:`~host.worker.MeshWorker` s:

- ``inproc``: the workers live in this process and run one after another;
- ``process``: one local process per system (``multiprocessing``, spawned), running at once;
- ``ray``: one Ray actor per system, on a local Ray started here or the cluster at ``address``
  (the ``cluster`` extra; :mod:`host.swarm_ray`).
"""

import contextlib
import multiprocessing
import signal
import threading

import numpy as np

from wse.rtl.validate import count, integer

from .messages import SwarmError, decode, encode
from .worker import MeshWorker

__all__ = ["SwarmX", "Tree", "SwarmError", "TRANSPORTS"]

TRANSPORTS = ("inproc", "process", "ray")



class Tree:
    """The reduction tree over ``n`` leaves with fan-out ``k``: ``levels[0]`` are the leaves,
    ``levels[j]`` lists, for each node of level ``j``, its children in level ``j - 1``."""

    def __init__(self, n, k=2):
        self.n, self.k = count("systems", n), integer("fanout", k, 2)
        self.levels = [[[i] for i in range(n)]]
        width = n
        while width > 1:
            groups = [list(range(a, min(a + k, width))) for a in range(0, width, k)]
            self.levels.append(groups)
            width = len(groups)

    @property
    def depth(self):
        """SwarmX levels between MemoryX and the systems (``ceil(log_k N)``)."""
        return len(self.levels) - 1

    @property
    def links(self):
        """Every node's up-link, the systems' included."""
        return sum(len(level) for level in self.levels)

    def reduce(self, values):
        """Sum ``values`` (one per leaf: dicts of arrays) up the tree; the root's sum."""
        if len(values) != self.n:
            raise ValueError(f"reduce needs {self.n} values, not {len(values)}")
        level = list(values)
        for groups in self.levels[1:]:
            level = [_add([level[c] for c in children]) for children in groups]
        return level[0]


def _add(parts):
    total = dict(parts[0])
    for part in parts[1:]:
        for key, value in part.items():
            total[key] = total[key] + value
    return total


def _nbytes(message):
    return sum(v.nbytes for v in message.values() if isinstance(v, np.ndarray))


class SwarmX:
    """``systems`` mesh systems behind a tree of fan-out ``fanout`` over a ``transport``.

    ``worker`` are :class:`~host.worker.MeshWorker`'s keyword arguments (``config`` as a dict,
    ``backend``, ``check_golden``); ``address`` is Ray's (``None``: start a local Ray).
    """

    #: What :attr:`link_bytes` counts: bytes down the tree and bytes up it.
    LINKS = ("broadcast", "reduce")

    def __init__(self, systems=1, *, fanout=2, transport="inproc", worker=None, address=None):
        if transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {', '.join(TRANSPORTS)}, not "
                             f"{transport!r}")
        self.tree = Tree(systems, fanout)
        self.transport = transport
        self.link_bytes = dict.fromkeys(self.LINKS, 0)
        worker = dict(worker or {})
        if transport == "ray":
            from .swarm_ray import RayLeaves  # Ray is an optional extra
            leaves = RayLeaves
        else:
            leaves = {"inproc": _Inproc, "process": _Processes}[transport]
        self._leaves = leaves(self.tree.n, worker, address)

    @property
    def systems(self):
        return self.tree.n

    @property
    def workers(self):
        """The systems' :class:`~host.worker.MeshWorker` s, in system order: the ``inproc``
        transport's alone (the others' live in other processes); ``ValueError`` otherwise."""
        if self.transport != "inproc" or self._leaves is None:
            raise ValueError(f"only an open inproc swarm's workers are in this process, not "
                             f"those of {'a closed' if self._leaves is None else 'a'} "
                             f"{self.transport} swarm")
        return list(self._leaves.workers)

    def broadcast(self, stream, requests):
        """Send ``stream`` (a layer's :class:`~host.layer_stream.LayerStream`) to every system
        with its own ``requests[i]`` (a dict: ``op`` and arguments, or ``None`` for a system with
        nothing to do): each request carries the stream's fields as its ``stream``, encoded
        once with it. Returns the replies in system order (``None`` where the request was).
        Every link carries the stream once (:attr:`~host.layer_stream.LayerStream.nbytes`)."""
        if len(requests) != self.systems:
            raise ValueError(f"broadcast needs {self.systems} requests, not {len(requests)}")
        fields = stream.fields()
        self.link_bytes["broadcast"] += stream.nbytes
        return self.call([None if r is None else r | {"stream": fields} for r in requests])

    def call(self, requests):
        """One request per system (or ``None``), without a stream; the replies."""
        replies = self._leaves.call([None if r is None else encode(r) for r in requests])
        return [self._reply(i, data) for i, data in enumerate(replies)]

    @staticmethod
    def _reply(i, data):
        if data is None:
            return None
        reply = decode(data)
        if "error" in reply:
            raise SwarmError(f"system {i}: {reply['error']}")
        return reply

    def reduce(self, parts):
        """Sum ``parts`` (one ``{name: int64 array}`` per system: integers, or bf16's exact sums'
        digits) up the tree, exactly; every link carries one partial sum of the same size
        (counted as its arrays' bytes)."""
        self.link_bytes["reduce"] += max(_nbytes(p) for p in parts)
        return self.tree.reduce([{k: np.asarray(v, dtype=np.int64) for k, v in p.items()}
                                 for p in parts])

    def stats(self):
        """Tree depth, links and the bytes each link carried (every link carries the same)."""
        per_link = self.link_bytes["broadcast"] + self.link_bytes["reduce"]
        return {"systems": self.systems, "fanout": self.tree.k, "tree_depth": self.tree.depth,
                "links": self.tree.links, "transport": self.transport,
                "broadcast_bytes_per_link": self.link_bytes["broadcast"],
                "reduce_bytes_per_link": self.link_bytes["reduce"],
                "bytes_per_link": per_link, "bytes_total": per_link * self.tree.links}

    def close(self):
        if self._leaves is not None:
            self._leaves.close()
            self._leaves = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# -- transports ---------------------------------------------------------------------------------

class _Inproc:
    def __init__(self, n, worker, address):
        self.workers = []
        try:
            for i in range(n):
                self.workers.append(MeshWorker(**worker, index=i))
        except BaseException:
            self.close()
            raise

    def call(self, messages):
        return [None if m is None else w.handle(m) for w, m in zip(self.workers, messages)]

    def close(self):
        for w in self.workers:
            w.close()
        self.workers = []


def _serve(connection, worker, index):
    """A system's process: build the worker, then answer requests until ``None``."""
    try:
        mesh = MeshWorker(**worker, index=index)
    except Exception as error:
        connection.send_bytes(encode({"error": f"{type(error).__name__}: {error}"}))
        return
    connection.send_bytes(encode({"ready": True}))
    try:
        while True:
            data = connection.recv_bytes()
            if not data:
                break
            connection.send_bytes(mesh.handle(data))
    except EOFError:
        pass
    finally:
        mesh.close()


@contextlib.contextmanager
def _sigint_ignored():
    """SIGINT ignored while a system's process starts, so that it ignores it for good (Python
    keeps an inherited ``SIG_IGN``): Ctrl-C reaches the whole process group, and only this
    process, which owns the systems and closes them, should act on it (a system interrupted in
    the middle of a request would print its traceback and leave this one waiting)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class _Processes:
    def __init__(self, n, worker, address):
        ctx = multiprocessing.get_context("spawn")
        self.connections, self.processes = [], []
        for i in range(n):
            here, there = ctx.Pipe()
            p = ctx.Process(target=_serve, args=(there, worker, i), daemon=True,
                            name=f"wse-system-{i}")
            with _sigint_ignored():
                p.start()
            there.close()
            self.connections.append(here)
            self.processes.append(p)
        try:
            for i, c in enumerate(self.connections):
                reply = decode(self._receive(i, c))
                if "error" in reply:
                    raise SwarmError(f"system {i} did not start: {reply['error']}")
        except BaseException:
            self.close()
            raise

    def _receive(self, i, connection):
        try:
            return connection.recv_bytes()
        except EOFError:
            self.processes[i].join(timeout=5)
            raise SwarmError(f"system {i}'s process died (exit code "
                             f"{self.processes[i].exitcode})") from None

    def call(self, messages):
        sent = []
        for i, (c, m) in enumerate(zip(self.connections, messages)):
            if m is not None:
                c.send_bytes(m)
                sent.append(i)
        replies = [None] * len(messages)
        for i in sent:          # read every reply, even after a failure, to stay in step
            try:
                replies[i] = self._receive(i, self.connections[i])
            except SwarmError as error:
                replies[i] = encode({"error": str(error)})
        return replies

    def close(self):
        for c in self.connections:
            try:
                c.send_bytes(b"")
            except OSError:
                pass
        for p in self.processes:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
        for c in self.connections:
            c.close()
        self.connections, self.processes = [], []
