"""An encoder of AWS event-stream messages (``application/vnd.amazon.eventstream``), the binary
framing of Bedrock's ``converse-stream`` and ``invoke-with-response-stream`` responses.

One message: a 12-byte prelude (total length and headers length, both big-endian uint32, then the
CRC32 of those 8 bytes), the headers (each: name length as one byte, the UTF-8 name, value type 7
= string, value length as a big-endian uint16, the UTF-8 value), the payload, and the CRC32 of
everything before it. botocore's own decoder (``botocore.eventstream.EventStreamBuffer``) reads it.
"""

from __future__ import annotations

import json
import struct
import zlib
from typing import Any

__all__ = ["encode_event", "encode_exception", "encode_message"]

_STRING = 7  # header value type: string


def _header(name: str, value: str) -> bytes:
    raw_name, raw_value = name.encode(), value.encode()
    if len(raw_name) > 255 or len(raw_value) > 0xFFFF:
        raise ValueError(f"event-stream header {name!r} too long")
    return (
        bytes([len(raw_name)]) + raw_name + bytes([_STRING]) + struct.pack(">H", len(raw_value)) + raw_value
    )


def encode_message(headers: dict[str, str], payload: bytes) -> bytes:
    """One event-stream message with string ``headers`` and ``payload``."""
    raw_headers = b"".join(_header(name, value) for name, value in headers.items())
    total = 12 + len(raw_headers) + len(payload) + 4
    prelude = struct.pack(">II", total, len(raw_headers))
    head = prelude + struct.pack(">I", zlib.crc32(prelude)) + raw_headers + payload
    return head + struct.pack(">I", zlib.crc32(head))


def encode_event(event_type: str, payload: dict[str, Any]) -> bytes:
    """An ``event`` message of ``event_type`` whose payload is ``payload`` as JSON."""
    headers = {":event-type": event_type, ":content-type": "application/json", ":message-type": "event"}
    return encode_message(headers, json.dumps(payload).encode())


def encode_exception(exception_type: str, message: str) -> bytes:
    """An ``exception`` message (a modeled error in the middle of a stream)."""
    headers = {
        ":exception-type": exception_type,
        ":content-type": "application/json",
        ":message-type": "exception",
    }
    return encode_message(headers, json.dumps({"message": message}).encode())
