"""Reading ``.npy`` arrays (alone or inside an ``.npz`` archive) without trusting their headers.

``numpy.load`` believes the header: a 100-byte file that claims a ``(10**6, 10**6)`` float64
array makes it allocate 8 TB and die with ``MemoryError``. These readers check first that the
header is well formed, that the dtype is a plain number (never an object, so never pickle), and
that the file holds exactly the bytes the shape and dtype promise; anything else is an
:class:`ArrayFileError` naming the file and the problem, before anything is allocated.
"""

import math
import tokenize
import zipfile
from pathlib import Path

import numpy as np

__all__ = ["ArrayFileError", "load_npy", "load_npz", "read_npy"]

_KINDS = set("biuf")        # bool, signed, unsigned, float


class ArrayFileError(ValueError):
    """An ``.npy`` / ``.npz`` file that is missing, malformed, or not what its header says."""


def read_npy(file, size, *, what):
    """The array in the open binary ``file`` holding ``size`` bytes of ``.npy`` data.

    ``what`` names the file in errors. Raises :class:`ArrayFileError` when the header is
    malformed, the dtype is not a number, or the data is not exactly ``shape x itemsize`` bytes.
    """
    try:
        version = np.lib.format.read_magic(file)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(file)
        elif version in ((2, 0), (3, 0)):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(file)
        else:
            raise ValueError(f"unknown .npy version {version}")
    except (ValueError, OSError, EOFError, SyntaxError, tokenize.TokenError) as error:
        # a header that never closes a bracket is a ``TokenError`` from numpy's parser
        reason = error.args[0] if isinstance(error, tokenize.TokenError) else error
        raise ArrayFileError(f"{what} is not a valid .npy array: {reason}") from None
    if dtype.kind not in _KINDS or dtype.hasobject:
        raise ArrayFileError(f"{what} holds {dtype} values; only numbers are accepted")
    if any(n < 0 for n in shape):       # numpy's header parser lets them through
        raise ArrayFileError(f"{what} is not a valid .npy array: its header claims the shape "
                             f"{shape}")
    header_bytes = file.tell() if hasattr(file, "tell") else None
    expected = math.prod(shape) * dtype.itemsize
    if header_bytes is not None and size - header_bytes != expected:
        raise ArrayFileError(f"{what}: its header claims a {'x'.join(map(str, shape)) or 'scalar'} "
                             f"{dtype} array ({expected} bytes) but the file holds "
                             f"{size - header_bytes} bytes of data")
    data = file.read(expected)
    if len(data) != expected:
        raise ArrayFileError(f"{what} is truncated: {len(data)} of {expected} data bytes")
    array = np.frombuffer(data, dtype=dtype)
    return array.reshape(shape, order="F" if fortran else "C").copy()


def load_npy(path, *, what=None):
    """The array in the ``.npy`` file ``path`` (:func:`read_npy`'s checks)."""
    path = Path(path)
    what = what or str(path)
    try:
        with open(path, "rb") as f:
            return read_npy(f, path.stat().st_size, what=what)
    except FileNotFoundError:
        raise ArrayFileError(f"{what} does not exist") from None
    except IsADirectoryError:
        raise ArrayFileError(f"{what} is a directory, not an .npy file") from None


def load_npz(path, *, what=None, stored_only=False):
    """``{name: array}`` from the ``.npz`` archive ``path``, every member checked as by
    :func:`read_npy` (and by the archive's CRC-32 as it is read).

    With ``stored_only`` a compressed member is refused: an uncompressed archive
    (``numpy.savez``) can hold no more bytes than the file has, while a small deflated member
    can claim, and expand to, gigabytes."""
    path = Path(path)
    what = what or str(path)
    arrays = {}
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                if not info.filename.endswith(".npy"):
                    raise ArrayFileError(f"{what} holds {info.filename!r}, not an .npy array")
                name = info.filename[:-4]
                if stored_only and info.compress_type != zipfile.ZIP_STORED:
                    raise ArrayFileError(f"{what}[{name}] is compressed; only uncompressed "
                                         f"archives (numpy.savez) are read here")
                with archive.open(info) as member:
                    arrays[name] = read_npy(member, info.file_size, what=f"{what}[{name}]")
    except FileNotFoundError:
        raise ArrayFileError(f"{what} does not exist") from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError) as error:
        raise ArrayFileError(f"{what} is corrupt or truncated: {error}") from None
    return arrays
