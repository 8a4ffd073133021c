"""Checkpoint files: named numeric arrays plus a JSON header, written atomically, read without
pickle.

A checkpoint is one ``.npz`` archive (``numpy.savez``, uncompressed) holding the arrays and a
``__meta__`` member: the JSON header as bytes, with a format tag, a version and the SHA-256 of
every array (name, dtype, shape and bytes). :func:`save` writes a temporary file in the target's
directory, fsyncs it, renames it over the target and fsyncs the directory, so a crash leaves
either the old checkpoint or the new one, never half of one; a temporary file left by a writer
killed mid-write (its name holds the writer's process id) is removed by the next :func:`save`
into the same folder. :func:`load` reads through
:func:`host.npyio.load_npz` (every member's header checked against its size before anything is
allocated, numbers only, no pickle) and refuses anything that is not exactly what was written
(:class:`CheckpointError`, naming the problem).
"""

import hashlib
import json
import os
import re
import tempfile
from pathlib import Path

import numpy as np

from wse.sim.scratch import alive

from .npyio import ArrayFileError, load_npz

__all__ = ["save", "load", "digest", "sweep_temporaries", "CheckpointError", "FORMAT",
           "VERSION"]

FORMAT = "wse-mini-checkpoint"
VERSION = 1
_META = "__meta__"
_DTYPES = set("biuf")       # bool, signed, unsigned, float: no objects, no strings


class CheckpointError(ValueError):
    """A checkpoint that cannot be used: missing, corrupt, or for another model."""


def digest(arrays, meta=None):
    """SHA-256 (hex) over ``arrays`` in name order (names, dtypes, shapes and bytes) and, if
    given, ``meta`` as canonical JSON."""
    h = hashlib.sha256()
    if meta is not None:
        h.update(json.dumps(meta, sort_keys=True).encode())
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def save(path, meta, arrays):
    """Write ``arrays`` (``{name: numeric array}``) and ``meta`` (JSON-able) to ``path``
    atomically; returns the arrays' digest."""
    path = Path(path)
    for name, a in arrays.items():
        if name == _META or not isinstance(name, str):
            raise ValueError(f"array name {name!r} is reserved or not a string")
        if np.asarray(a).dtype.kind not in _DTYPES:
            raise ValueError(f"array {name!r} has dtype {np.asarray(a).dtype}: only numbers "
                             f"go in a checkpoint")
    arrays = {k: np.ascontiguousarray(v) for k, v in arrays.items()}
    sha = digest(arrays, meta)
    header = {"format": FORMAT, "version": VERSION, "sha256": sha, "meta": meta}
    blob = np.frombuffer(json.dumps(header, sort_keys=True).encode(), dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    sweep_temporaries(path.parent)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}-", suffix=".tmp",
                               dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **{_META: blob}, **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return sha


#: A temporary file of :func:`save`: ``.<name>.<pid>-<random>.tmp``.
_TEMPORARY = re.compile(r"\.(.+)\.(\d+)-[^.]+\.tmp")


def sweep_temporaries(folder):
    """Remove the temporary files that :func:`save`s killed mid-write (``SIGKILL``, a power
    cut) left in ``folder``: those whose writing process no longer runs. Returns their names."""
    removed = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        match = _TEMPORARY.fullmatch(entry.name)
        if match is None or alive(int(match[2])):
            continue
        try:
            if entry.is_file(follow_symlinks=False):
                os.unlink(entry.path)
                removed.append(entry.name)
        except OSError:
            continue
    return removed


def load(path):
    """``(meta, arrays)`` from a checkpoint written by :func:`save`; :class:`CheckpointError`
    if it is missing, truncated, corrupt, or not a checkpoint of this format and version."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    try:
        arrays = load_npz(path, what=f"checkpoint {path}", stored_only=True)
    except ArrayFileError as error:
        raise CheckpointError(str(error)) from None
    if _META not in arrays:
        raise CheckpointError(f"{path} is not a wse-mini checkpoint (no {_META})")
    try:
        header = json.loads(arrays.pop(_META).tobytes().decode())
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        raise CheckpointError(f"checkpoint {path} has a corrupt header: {error}") from None
    if not isinstance(header, dict) or "meta" not in header:
        raise CheckpointError(f"checkpoint {path} has a corrupt header (no meta)")
    if header.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a wse-mini checkpoint (format "
                              f"{header.get('format')!r})")
    if header.get("version") != VERSION:
        raise CheckpointError(f"checkpoint {path} is version {header.get('version')!r}; this "
                              f"wse-mini reads version {VERSION}")
    if digest(arrays, header["meta"]) != header.get("sha256"):
        raise CheckpointError(f"checkpoint {path} is corrupt: its contents do not match the "
                              f"SHA-256 in its header")
    return header["meta"], arrays
