"""The pool works out each operation's window and bucket name once, not per reserve and settle: the
kept values must be exactly what a fresh computation gives, however the clock moves (forward
across window ends, backward, in calendar months)."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from veronica_mw.pools._backend import Op
from veronica_mw.pools.budget_pool import BudgetPool

DAY = 86_400.0


def fresh(pool: BudgetPool, key_hash: str, now: float) -> tuple[Op, float, float]:
    window = pool.window.at(now)
    ttl_ms = math.ceil((window.end - now + pool.reservation_ttl_s + 60.0) * 1000)
    bucket = f"{pool.name}:{pool.window.label}:{{{key_hash}}}"
    op = Op(bucket, window.id, math.floor(now * 1000), ttl_ms, math.ceil(pool.reservation_ttl_s * 1000))
    return op, now, window.end


@settings(max_examples=60, deadline=None)
@given(
    window=st.sampled_from([1.0, 0.25, 60.0, DAY, "hour", "month"]),
    steps=st.lists(
        st.tuples(st.floats(-3 * DAY, 40 * DAY, allow_nan=False), st.sampled_from(["a", "b", "c"])),
        min_size=1,
        max_size=40,
    ),
)
def test_kept_window_and_bucket_names_match_a_fresh_computation(
    window: float | str, steps: list[tuple[float, str]]
) -> None:
    now = [1.7e9]
    pool = BudgetPool(10.0, window_s=window, key_func=str, clock=lambda: now[0], name="cache")
    for delta, tenant in steps:
        now[0] = 1.7e9 + delta
        key_hash = pool.hash_key(tenant)
        assert pool._op(key_hash) == fresh(pool, key_hash, now[0])


def test_a_window_end_resets_the_spend_through_the_kept_window() -> None:
    now = [DAY * 20_000 + DAY - 0.5]  # half a second before a UTC day ends
    pool = BudgetPool(1.0, window_s="day", key_func=str, clock=lambda: now[0])
    ledger = pool.ledger("t")
    assert ledger.reserve(0.6)
    ledger.settle(0.6, 0.6)
    assert not pool.ledger("t").reserve(0.6)  # 0.6 + 0.6 > 1.0 in this window
    now[0] += 1.0  # the next day
    assert pool.usage("t").spent_usd == 0.0
    assert pool.ledger("t").reserve(0.6)


def test_a_reassigned_window_or_name_is_used_at_once() -> None:
    from veronica_mw.pools._backend import WindowSpec

    now = [1.7e9]
    pool = BudgetPool(10.0, window_s="hour", key_func=str, clock=lambda: now[0], name="before")
    key_hash = pool.hash_key("t")
    assert pool._op(key_hash) == fresh(pool, key_hash, now[0])
    pool.window = WindowSpec("day")
    assert pool._op(key_hash) == fresh(pool, key_hash, now[0])
    pool.name = "after"
    assert pool._op(key_hash) == fresh(pool, key_hash, now[0])
