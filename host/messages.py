"""The message codec SwarmX's transports share: a dict of JSON scalars and numeric arrays as
bytes, and back, with no pickle (so a process or a Ray actor at the other end gets exactly the
bytes the in-process backend sees); and :class:`SwarmError`, what a transport raises when a
system fails.

Layout: a 4-byte big-endian header length, a JSON header (the scalars, and for each array its
dtype, shape and byte range), then the arrays' bytes back to back.
"""

import json
import struct

import numpy as np

__all__ = ["encode", "decode", "SwarmError"]

_KINDS = set("biuf")


class SwarmError(RuntimeError):
    """A system failed a request (the message names the system and the error)."""


def encode(message):
    """``{name: JSON scalar/list/dict or numeric ndarray}`` -> bytes."""
    scalars, arrays, chunks, offset = {}, {}, [], 0
    for key, value in message.items():
        if isinstance(value, np.ndarray):
            if value.dtype.kind not in _KINDS:
                raise ValueError(f"{key}: only numeric arrays travel, not {value.dtype}")
            data = np.ascontiguousarray(value).tobytes()
            arrays[key] = [value.dtype.str, list(value.shape), offset, len(data)]
            chunks.append(data)
            offset += len(data)
        else:
            scalars[key] = value
    head = json.dumps({"scalars": scalars, "arrays": arrays}, separators=(",", ":")).encode()
    return struct.pack(">I", len(head)) + head + b"".join(chunks)


def decode(data):
    """bytes from :func:`encode` -> the dict (arrays are fresh, writable copies)."""
    (n,) = struct.unpack(">I", data[:4])
    head = json.loads(data[4:4 + n])
    body = memoryview(data)[4 + n:]
    message = dict(head["scalars"])
    for key, (dtype, shape, offset, length) in head["arrays"].items():
        if np.dtype(dtype).kind not in _KINDS:
            raise ValueError(f"{key}: dtype {dtype} is not numeric")
        raw = np.frombuffer(body[offset:offset + length], dtype=dtype)
        message[key] = raw.reshape(shape).copy()
    return message
