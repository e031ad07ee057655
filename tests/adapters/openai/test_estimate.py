"""The worst-case estimator's reading of request bodies: exact token estimates for every shape it
walks (the sum over the text, inline files and images as a flat count, SDK objects, the depth cap)."""

from __future__ import annotations

from collections import UserDict
from typing import Any

from veronica_mw.adapters._provider_calls import field
from veronica_mw.adapters._provider_estimate import _BLOB_TOKENS, text_tokens


class _Content:
    def __init__(self, text: str) -> None:
        self.parts = [{"text": text}]
        self.role = "user"


def test_text_is_counted_at_four_characters_a_token_rounded_up() -> None:
    messages: list[Any] = [
        {"role": "user", "content": "x" * 10},
        {"role": "assistant", "content": [{"type": "text", "text": "y" * 7}], "name": None},
    ]
    # "user" 4 + 10 + "assistant" 9 + "text" 4 + 7 = 34 characters -> 9 tokens; numbers and None add nothing
    assert text_tokens(messages, None, 3, 2.5, True, b"zz") == 9
    assert text_tokens() == 0
    assert text_tokens(("ab",), ["c"]) == 1


def test_inline_files_and_images_are_a_flat_count() -> None:
    image = "data:image/png;base64," + "A" * 300
    source = {"type": "base64", "media_type": "image/png", "data": "B" * 5000}
    assert text_tokens([image]) == _BLOB_TOKENS
    assert text_tokens([{"source": source}, "abcd"]) == _BLOB_TOKENS + 1
    assert text_tokens(["data:short"]) == 3  # a short data: string is text


def test_sdk_objects_mappings_and_the_depth_cap() -> None:
    assert text_tokens([_Content("z" * 8)]) == 3  # "z"*8 + "text" + "user" = 16 characters
    assert text_tokens(UserDict({"k": "abcdefgh"})) == 2  # any Mapping, not only dict
    deep: Any = "q" * 40
    for _ in range(20):
        deep = [deep]
    assert text_tokens(deep) == 0  # below the walk's depth cap
    shallow: Any = "q" * 40
    for _ in range(10):
        shallow = [shallow]
    assert text_tokens(shallow) == 10


def test_field_reads_mappings_and_objects_alike() -> None:
    content = _Content("t")
    assert field({"model": "m"}, "model") == "m"
    assert field(UserDict({"model": "u"}), "model") == "u"
    assert field(content, "role") == "user"
    assert field(content, "missing") is None
    assert field({"role": "x"}, "role") == "x"  # the per-type answer is kept apart for each type
