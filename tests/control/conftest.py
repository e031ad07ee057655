"""Fixtures for the control tests: real redis-server processes (shared with the pool tests)."""

from __future__ import annotations

from ..pools.conftest import redis_server, redis_url

__all__ = ["redis_server", "redis_url"]
from ..support.redis_cluster import _redis_cluster_session, redis_cluster  # noqa: E402, F401  (fixtures)
