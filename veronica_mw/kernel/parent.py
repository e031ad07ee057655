"""The protocol of a budget above a context (a tenant pool)."""

from __future__ import annotations

from typing import Protocol


class BudgetParent(Protocol):
    """A budget above the context (e.g. a tenant pool): reserve before, settle after each call.

    A parent that also has the coroutine versions (:class:`AsyncBudgetParent`) is awaited by the
    kernel's async API; one without them is called synchronously on both paths.

    A parent may also expose ``refusal_status`` (an HTTP status; 503 = the budget store is
    unavailable) and ``refusal_detail`` describing its last refusal: a 503 refusal halts the
    context with ``policy_denied`` and a 503 status hint instead of ``budget_exceeded``/429.
    """

    def reserve(self, amount_usd: float) -> bool: ...

    def settle(self, reserved_usd: float, actual_usd: float) -> None: ...

    def retry_after_s(self) -> float | None: ...


class AsyncBudgetParent(BudgetParent, Protocol):
    """A budget parent whose answers may need I/O: the coroutine API never blocks the loop on it.

    ``areserve``/``asettle`` are awaited by ``abegin_call``, ``awrap_*``, ``acall_*`` and
    ``node.acommit``/``afail``/``arelease``; sync calls use ``reserve``/``settle`` even in an async
    app (a sync call made on the event loop blocks it anyway). ``asettle`` must finish its work
    even if the awaiting task is cancelled meanwhile (the kernel does not retry it). A parent with
    a true ``blocking_free`` attribute (an in-process pool) is called synchronously on both paths.
    """

    async def areserve(self, amount_usd: float) -> bool: ...

    async def asettle(self, reserved_usd: float, actual_usd: float) -> None: ...
