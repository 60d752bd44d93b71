"""AWS event-stream frames (application/vnd.amazon.eventstream) for Bedrock ConverseStream.

Frame layout, per the AWS event-stream encoding: total length (4 bytes), headers length (4),
CRC32 of those 8 bytes, headers, payload, CRC32 of everything before it. Headers are
``name length (1), name, type 7 = string (1), value length (2), value``.
"""

from __future__ import annotations

import json
import struct
import zlib
from typing import Any


def _headers(values: dict[str, str]) -> bytes:
    out = b""
    for name, value in values.items():
        n, v = name.encode(), value.encode()
        out += struct.pack(">B", len(n)) + n + b"\x07" + struct.pack(">H", len(v)) + v
    return out


def frame(headers: dict[str, str], payload: bytes) -> bytes:
    head = _headers(headers)
    total = 12 + len(head) + len(payload) + 4
    prelude = struct.pack(">II", total, len(head))
    prelude += struct.pack(">I", zlib.crc32(prelude) & 0xFFFFFFFF)
    body = prelude + head + payload
    return body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)


def event(event_type: str, payload: dict[str, Any]) -> bytes:
    return frame(
        {":event-type": event_type, ":content-type": "application/json", ":message-type": "event"},
        json.dumps(payload).encode(),
    )


def exception(exception_type: str, message: str) -> bytes:
    return frame(
        {
            ":exception-type": exception_type,
            ":content-type": "application/json",
            ":message-type": "exception",
        },
        json.dumps({"message": message}).encode(),
    )


def text_reply(text: str) -> list[bytes]:
    return [
        event("messageStart", {"role": "assistant"}),
        event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": text}}),
        event("contentBlockStop", {"contentBlockIndex": 0}),
        event("messageStop", {"stopReason": "end_turn"}),
        event(
            "metadata",
            {
                "usage": {"inputTokens": 5, "outputTokens": 2, "totalTokens": 7},
                "metrics": {"latencyMs": 1},
            },
        ),
    ]


CONTENT_TYPE = "application/vnd.amazon.eventstream"
