"""redis-py is imported only when a Redis backend is built; without it the error names the extra."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60
    )


def test_importing_the_budget_modules_does_not_import_redis() -> None:
    result = run(
        """
        import sys
        import veronica_mw.pools.budget_pool, veronica_mw.pools.redis_backend
        import veronica_mw.pools.distributed_breaker
        from veronica_mw.pools.budget_pool import BudgetPool
        BudgetPool(1.0, window_s=60, key_func=str).ledger("t").reserve(0.1)
        assert not any(m == "redis" or m.startswith("redis.") for m in sys.modules), "redis imported"
        print("ok")
        """
    )
    assert result.stdout.strip() == "ok", result.stderr


def test_missing_redis_raises_the_install_hint() -> None:
    result = run(
        """
        import sys
        sys.modules["redis"] = None  # as if redis-py were not installed
        from veronica_mw import MissingFrameworkError
        from veronica_mw.pools.redis_backend import RedisBudgetBackend
        from veronica_mw.pools.distributed_breaker import DistributedCircuitBreaker
        for build in (RedisBudgetBackend, DistributedCircuitBreaker):
            try:
                build("redis://127.0.0.1:6379/0")
            except MissingFrameworkError as exc:
                print(exc)
        """
    )
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 2, result.stderr
    assert all('pip install "veronica-mw[redis]"' in line for line in lines)
