"""The framing the host and the cocotb mesh server share: a 4-byte big-endian length, then a
JSON object (``runtime.system.CocotbSystem`` on one end, ``tb.mesh_server`` on the other)."""

import json
import struct

__all__ = ["send_message", "recv_message"]


def send_message(sock, obj):
    """Send ``obj`` (JSON-able) as one message."""
    body = json.dumps(obj, separators=(",", ":")).encode()
    sock.sendall(struct.pack(">I", len(body)) + body)


def recv_message(sock):
    """The next message, or ``None`` if the other end closed the connection between messages."""
    head = _recv_exactly(sock, 4)
    if head is None:
        return None
    (length,) = struct.unpack(">I", head)
    return json.loads(_recv_exactly(sock, length))


def _recv_exactly(sock, n):
    chunks, left = [], n
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            if left == n:
                return None
            raise ConnectionError("the host closed the connection mid-message")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
