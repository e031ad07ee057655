"""The fake server's AWS event-stream encoder, read back by botocore's own decoder."""

from __future__ import annotations

import json
import zlib

import pytest
from botocore.eventstream import ChecksumMismatch, EventStreamBuffer  # type: ignore[import-untyped]

from ...support.aws_eventstream import encode_event, encode_exception


def _decode(data: bytes, step: int) -> list[object]:
    buffer = EventStreamBuffer()
    messages: list[object] = []
    for i in range(0, len(data), step):  # fed in pieces, as a socket delivers them
        buffer.add_data(data[i : i + step])
        messages.extend(buffer)
    return messages


@pytest.mark.parametrize("step", [1, 7, 4096])
def test_botocore_decodes_what_the_encoder_writes(step: int) -> None:
    data = encode_event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "héllo"}})
    data += encode_exception("throttlingException", "slow down")
    first, second = _decode(data, step)
    assert first.headers == {  # type: ignore[attr-defined]
        ":event-type": "contentBlockDelta",
        ":content-type": "application/json",
        ":message-type": "event",
    }
    assert json.loads(first.payload) == {"contentBlockIndex": 0, "delta": {"text": "héllo"}}  # type: ignore[attr-defined]
    assert second.headers[":exception-type"] == "throttlingException"  # type: ignore[attr-defined]
    assert first.prelude.total_length == len(data) - len(encode_exception("throttlingException", "slow down"))  # type: ignore[attr-defined]
    assert second.crc == zlib.crc32(data[len(data) - second.prelude.total_length : -4])  # type: ignore[attr-defined]


def test_a_corrupted_message_fails_botocore_checksum() -> None:
    data = bytearray(encode_event("messageStop", {"stopReason": "end_turn"}))
    data[-6] ^= 0xFF  # one payload byte flipped
    with pytest.raises(ChecksumMismatch):
        _decode(bytes(data), 4096)
