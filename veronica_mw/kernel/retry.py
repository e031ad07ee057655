"""Retries with exponential backoff and jitter that draw from the chain-wide retry budget (G3)."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from ._validate import check_int, check_number
from .context import get_current_execution_context
from .exceptions import ExecutionHalted
from .policy import PolicyContext, PolicyDecision

T = TypeVar("T")
_ALLOW = PolicyDecision(allowed=True, policy_type="retry")


class RetryContainer:
    """Run ``fn`` up to ``1 + max_retries`` times.

    Inside an :class:`~veronica_mw.ExecutionContext` every retry also draws from the context's
    ``max_retries_total``, so nested containers share one ceiling instead of multiplying calls:
    a failure the context already recorded (a wrapped call that raised) is not drawn twice, and
    once the context halts no further attempt is made. ``ExecutionHalted`` is never retried.
    """

    __slots__ = ("max_retries", "backoff_base", "backoff_max", "jitter", "_sleep")

    def __init__(
        self,
        max_retries: int = 3,
        backoff_base: float = 0.1,
        backoff_max: float = 10.0,
        jitter: float = 0.25,
        *,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.max_retries = check_int("max_retries", max_retries)
        self.backoff_base = check_number("backoff_base", backoff_base)
        self.backoff_max = check_number("backoff_max", backoff_max)
        self.jitter = check_number("jitter", jitter)
        if self.jitter > 1:
            raise ValueError("jitter must be between 0 and 1")
        self._sleep = sleep

    @property
    def policy_type(self) -> str:
        return "retry"

    def check(self, context: PolicyContext) -> PolicyDecision:
        """As a pipeline policy: deny once the chain has used ``max_retries`` retries."""
        if context.retries_used > self.max_retries:
            return PolicyDecision(
                allowed=False, policy_type="retry", reason=f"more than {self.max_retries} retries"
            )
        return _ALLOW

    def reset(self) -> None:
        pass

    def delay(self, attempt: int) -> float:
        base: float = min(self.backoff_base * (2**attempt), self.backoff_max)
        return max(0.0, base * (1.0 + self.jitter * (2 * random.random() - 1)))

    def _after_failure(self, exc: Exception, attempt: int) -> None:
        """Decide whether another attempt may run; raise if not."""
        ctx = get_current_execution_context()
        if ctx is not None:
            # The kernel marks a failure it drew a retry for with the chain id of its context
            # (a tuple of them for a nested context, whose ancestors drew it as well).
            recorded = getattr(exc, "__veronica_recorded__", None)
            if recorded != ctx.chain_id and not (isinstance(recorded, tuple) and ctx.chain_id in recorded):
                ctx.record_retry(exc)
            if ctx.aborted:
                raise ctx.halted_error() from exc
        if attempt >= self.max_retries:
            raise exc

    def execute(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        attempt = 0
        while True:
            try:
                return fn(*args, **kwargs)
            except ExecutionHalted:
                raise
            except Exception as exc:
                self._after_failure(exc, attempt)
                self._sleep(self.delay(attempt))
                attempt += 1

    async def aexecute(self, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        attempt = 0
        while True:
            try:
                return await fn(*args, **kwargs)
            except ExecutionHalted:
                raise
            except Exception as exc:
                self._after_failure(exc, attempt)
                await asyncio.sleep(self.delay(attempt))
                attempt += 1
