"""Temporary folders owned by a process, and the sweep of those whose process is gone.

A simulation's socket or session folder lives in the temporary directory while its process
runs; the process removes it when it ends, unless it cannot: killed by ``SIGKILL``, or by a
signal it does not handle. Each folder's name holds its owner's process id
(``<prefix><pid>-<random>``), so the next process that makes a folder of the same kind removes
those whose owner no longer runs (:func:`make_folder`).
"""

import os
import re
import shutil
import tempfile
from pathlib import Path

__all__ = ["alive", "make_folder", "sweep"]


def make_folder(prefix):
    """A new folder ``<prefix><pid>-<random>`` in the temporary directory (its path), after
    :func:`sweep` removed the folders of ``prefix`` left by processes that are gone."""
    sweep(prefix)
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-"))


def sweep(prefix, root=None):
    """Remove the folders ``<prefix><pid>-*`` under ``root`` (the temporary directory) that
    belong to this user and whose process ``pid`` no longer runs; returns how many went."""
    root = Path(root or tempfile.gettempdir())
    pattern = re.compile(re.escape(prefix) + r"(\d+)-[^/]+")
    removed = 0
    try:
        entries = list(os.scandir(root))
    except OSError:
        return 0
    for entry in entries:
        match = pattern.fullmatch(entry.name)
        if match is None or alive(int(match[1])):
            continue
        try:
            if not entry.is_dir(follow_symlinks=False) or \
                    entry.stat(follow_symlinks=False).st_uid != os.getuid():
                continue
        except OSError:
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed += 1
    return removed


def alive(pid):
    """Whether process ``pid`` runs (or may: one of another user's, or a number no process
    can have)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True
