"""The message codec SwarmX's transports share: a dict of JSON scalars, numeric arrays and
nested dicts holding arrays as bytes, and back, with no pickle (so a process or a Ray actor at
the other end gets exactly the bytes the in-process backend sees); and :class:`SwarmError`,
what a transport raises when a system fails.

Layout: a 4-byte big-endian header length, a JSON header (the scalars, for each array its dtype,
shape and byte range, and for each nested dict holding arrays its own scalars and arrays under
``messages``), then the arrays' bytes back to back. A nested dict travels as part of the one
message (a layer's stream inside a request: :meth:`host.layer_stream.LayerStream.fields`),
never as bytes encoded on their own inside it.
"""

import json
import struct

import numpy as np

__all__ = ["encode", "decode", "size", "SwarmError"]

_KINDS = set("biuf")


class SwarmError(RuntimeError):
    """A system failed a request (the message names the system and the error)."""


def _head(message, chunks, offset=0):
    """The JSON header of ``message`` with its arrays from byte ``offset``, and the offset after
    them; their bytes are appended to ``chunks`` (``None``: only sized)."""
    scalars, arrays, nested = {}, {}, {}
    for key, value in message.items():
        if isinstance(value, np.ndarray):
            if value.dtype.kind not in _KINDS:
                raise ValueError(f"{key}: only numeric arrays travel, not {value.dtype}")
            arrays[key] = [value.dtype.str, list(value.shape), offset, value.nbytes]
            if chunks is not None:
                chunks.append(np.ascontiguousarray(value).tobytes())
            offset += value.nbytes
        elif isinstance(value, dict) and any(isinstance(v, np.ndarray) for v in value.values()):
            nested[key], offset = _head(value, chunks, offset)
        else:
            scalars[key] = value
    head = {"scalars": scalars, "arrays": arrays}
    if nested:
        head["messages"] = nested
    return head, offset


def _header_bytes(head):
    return json.dumps(head, separators=(",", ":")).encode()


def encode(message):
    """``{name: JSON scalar/list/dict, numeric ndarray, or such a dict holding arrays}`` ->
    bytes."""
    chunks = []
    head = _header_bytes(_head(message, chunks)[0])
    return struct.pack(">I", len(head)) + head + b"".join(chunks)


def size(message):
    """``len(encode(message))``, without copying the arrays."""
    head, body = _head(message, None)
    return 4 + len(_header_bytes(head)) + body


def decode(data):
    """bytes from :func:`encode` -> the dict (arrays are fresh, writable copies)."""
    (n,) = struct.unpack(">I", data[:4])
    head = json.loads(data[4:4 + n])
    return _message(head, memoryview(data)[4 + n:])


def _message(head, body):
    message = dict(head["scalars"])
    for key, (dtype, shape, offset, length) in head["arrays"].items():
        if np.dtype(dtype).kind not in _KINDS:
            raise ValueError(f"{key}: dtype {dtype} is not numeric")
        raw = np.frombuffer(body[offset:offset + length], dtype=dtype)
        message[key] = raw.reshape(shape).copy()
    for key, nested in head.get("messages", {}).items():
        message[key] = _message(nested, body)
    return message
