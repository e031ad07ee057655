"""Input validation shared by every limit-carrying object (guarantee G6)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any


def check_number(field: str, value: Any) -> float:
    """Return ``value`` as a float if it is a finite, non-negative real number. Bools are rejected on
    purpose: ``max_cost_usd=True`` is a bug, not "1 dollar"."""
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


def check_fractions(field: str, value: Any) -> tuple[float, ...]:
    """Return ``value`` (an iterable of numbers strictly between 0 and 1) as a sorted tuple without
    duplicates. Strings, mappings and bools are rejected like any other non-number."""
    if isinstance(value, (str, bytes, dict)) or not isinstance(value, Iterable):
        raise TypeError(f"{field} must be a tuple of fractions, got {type(value).__name__} {value!r}")
    fractions: set[float] = set()
    for item in value:
        if isinstance(item, bool) or not isinstance(item, (int, float)):
            raise TypeError(f"{field} entries must be numbers, got {type(item).__name__} {item!r}")
        if math.isnan(item) or not 0 < item < 1:
            raise ValueError(f"{field} entries must be fractions strictly between 0 and 1, got {item!r}")
        fractions.add(float(item))
    return tuple(sorted(fractions))
