"""Input validation shared by every limit-carrying object (guarantee G6)."""

from __future__ import annotations

import math
from typing import Any


def check_number(field: str, value: Any) -> float:
    """Return ``value`` as a float if it is a finite, non-negative real number.

    Bools are rejected on purpose: ``max_cost_usd=True`` is a bug, not "1 dollar".
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{field} must be a non-negative number, got {type(value).__name__} {value!r}")
    if math.isnan(value) or math.isinf(value):
        raise ValueError(f"{field} must be finite, got {value!r}")
    if value < 0:
        raise ValueError(f"{field} must be >= 0, got {value!r}")
    return float(value)


def check_int(field: str, value: Any) -> int:
    """Return ``value`` if it is a non-negative int (floats and bools are rejected)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{field} must be a non-negative integer, got {type(value).__name__} {value!r}")
    if value < 0:
        raise ValueError(f"{field} must be >= 0, got {value!r}")
    return value
