"""Tenant budget pools (in-process and Redis), failover and the distributed circuit breaker."""
