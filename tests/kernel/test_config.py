from __future__ import annotations

import math
from typing import Any

import pytest

from veronica_mw import ExecutionConfig, WrapOptions

VALID = {"max_cost_usd": 1.0, "max_steps": 10, "max_retries_total": 3, "timeout_ms": 0}


@pytest.mark.parametrize("field", ["max_cost_usd", "max_steps", "max_retries_total", "timeout_ms"])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, -1])
def test_g6_invalid_limits_cannot_be_constructed(field: str, bad: float) -> None:
    kwargs: dict[str, Any] = dict(VALID, **{field: bad})
    with pytest.raises((ValueError, TypeError), match=field):
        ExecutionConfig(**kwargs)


@pytest.mark.parametrize("field", ["max_cost_usd", "max_steps", "max_retries_total", "timeout_ms"])
@pytest.mark.parametrize("bad", [None, True, False, "1", [1], object()])
def test_g6_non_numbers_and_bools_are_type_errors(field: str, bad: object) -> None:
    kwargs: dict[str, Any] = dict(VALID, **{field: bad})
    with pytest.raises(TypeError, match=field):
        ExecutionConfig(**kwargs)


@pytest.mark.parametrize("field", ["max_steps", "max_retries_total"])
def test_integer_limits_reject_floats(field: str) -> None:
    kwargs: dict[str, Any] = dict(VALID, **{field: 2.5})
    with pytest.raises(TypeError, match=field):
        ExecutionConfig(**kwargs)


def test_config_is_frozen_and_normalises_cost() -> None:
    config = ExecutionConfig(max_cost_usd=2, max_steps=5, max_retries_total=0)
    assert isinstance(config.max_cost_usd, float)
    with pytest.raises(AttributeError):
        config.max_steps = 6  # type: ignore[misc]
    assert config.timeout_ms == 0


def test_zero_limits_are_valid() -> None:
    ExecutionConfig(max_cost_usd=0, max_steps=0, max_retries_total=0, timeout_ms=0)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -0.5, None, True, "0.1"])
def test_wrap_options_reject_invalid_hints(bad: object) -> None:
    with pytest.raises((ValueError, TypeError), match="cost_estimate_hint"):
        WrapOptions(cost_estimate_hint=bad)  # type: ignore[arg-type]


def test_wrap_options_reject_bad_types() -> None:
    with pytest.raises(TypeError, match="operation_name"):
        WrapOptions(operation_name=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="model"):
        WrapOptions(model=5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="cost_fn"):
        WrapOptions(cost_fn=1.0)  # type: ignore[arg-type]


def test_wrap_options_normalise_and_reject_every_field() -> None:
    assert WrapOptions(cost_estimate_hint=2).cost_estimate_hint.__class__ is float
    for bad in (float("nan"), float("inf"), -0.5, True):
        with pytest.raises((TypeError, ValueError)):
            WrapOptions(cost_estimate_hint=bad)

    class Name(str):
        pass

    assert WrapOptions(operation_name=Name("op"), model=Name("m")).operation_name == "op"
    assert WrapOptions(cost_fn=lambda result: 0.0).cost_fn is not None
    with pytest.raises(TypeError, match="session_message"):
        WrapOptions(session_message=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="provider"):
        WrapOptions(provider=b"openai")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="gen_ai_operation"):
        WrapOptions(gen_ai_operation=None)  # type: ignore[arg-type]
