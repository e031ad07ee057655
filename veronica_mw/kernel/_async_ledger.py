"""The coroutine half of admission and settlement: the parent budget is awaited, never blocked on.

A budget parent with ``areserve``/``asettle`` (a tenant pool on ``redis.asyncio``) is awaited from
``abegin_call``, ``awrap_*``/``acall_*`` and ``node.acommit``/``afail``/``arelease``. Every local
check is the sync path's own code (:meth:`Ledger._admit`, :meth:`Ledger._close`...): an async
caller marks the node's parent hold ``AWAITED`` under the lock before it runs a sync settle step,
that step (whichever hook's call closes the node) leaves the parent's settle ``OWED`` instead of
calling it, and the async caller awaits it -- exactly once, however the step ended. Without an
async parent these are the sync steps, run on the loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

from ._ledger import AWAITED, FREE, HELD, OWED
from .config import WrapOptions

if TYPE_CHECKING:
    from .graph import CallNode
    from .parent import AsyncBudgetParent, BudgetParent


class AsyncLedger:
    """Mixin of :class:`~veronica_mw.ExecutionContext` holding the async admission/settlement."""

    if not TYPE_CHECKING:
        __slots__ = ()

    if TYPE_CHECKING:
        _lock: threading.Lock
        _aparent: AsyncBudgetParent | None  # the parent again, when it has areserve/asettle

        def _admit(
            self, kind: str, options: WrapOptions, key: Hashable | None, parent_id: int | None
        ) -> tuple[CallNode | None, bool]: ...
        def _begin(
            self,
            kind: str,
            options: WrapOptions,
            key: Hashable | None,
            parent_id: int | None,
            inline: bool = False,
        ) -> CallNode | None: ...
        def _announce(self, node: CallNode, inline: bool) -> None: ...
        def _refused_by_parent(self, node: CallNode, parent: BudgetParent) -> None: ...
        def _close(
            self,
            node: CallNode,
            status: str,
            cost: float,
            *,
            refund_step: bool = False,
            result: Any = ...,
            error: BaseException | None = None,
        ) -> bool | None: ...
        def _fail(self, node: CallNode, exc: BaseException | None) -> None: ...
        def _release(self, node: CallNode, status: str) -> None: ...
        def _interrupt(self, node: CallNode, exc: BaseException | None = None) -> None: ...
        async def _aapprove(self, node: CallNode, arguments: Any, editable: Any) -> None: ...

    async def _abegin(
        self,
        kind: str,
        options: WrapOptions,
        key: Hashable | None,
        parent_id: int | None,
        inline: bool = False,
    ) -> CallNode | None:
        aparent = self._aparent
        if aparent is None:
            return self._begin(kind, options, key, parent_id, inline)
        node, fresh = self._admit(kind, options, key, parent_id)
        if node is None or not fresh:
            return node
        try:
            allowed = await aparent.areserve(node.reserved_usd)
        except BaseException:
            # Cancelled while the pool answered: the call never runs (the pool gives back a
            # reservation it made meanwhile).
            self._close(node, "refused", 0.0, refund_step=True)
            raise
        if not allowed:
            self._refused_by_parent(node, aparent)
            return None
        node._held = HELD
        self._announce(node, inline)
        return node

    # -- settling: the sync step, then the parent's settle awaited ---------------------------------

    def _owe(self, node: CallNode) -> bool:
        """Before an async caller runs a sync settle step: let it await the parent's settle."""
        if self._aparent is None or node._held != HELD:
            return False
        with self._lock:
            if node._held != HELD:
                return False
            node._held = AWAITED
        return True

    async def _pay(self, node: CallNode) -> None:
        with self._lock:
            held = node._held
            node._held = FREE if held == OWED else HELD if held == AWAITED else held
        if held == OWED:  # the parent makes its own I/O safe against cancellation
            await self._aparent.asettle(node.reserved_usd, node.cost_usd)  # type: ignore[union-attr]

    async def _asettled(self, node: CallNode, step: Callable[[], Any]) -> Any:
        """Run the sync settle ``step``; await the parent's settle it leaves owed (even if it raises)."""
        if not self._owe(node):
            return step()
        try:
            return step()
        finally:
            await self._pay(node)

    async def _afail(self, node: CallNode, exc: BaseException | None) -> None:
        await self._asettled(node, lambda: self._fail(node, exc))

    async def _arelease(self, node: CallNode, status: str) -> None:
        await self._asettled(node, lambda: self._release(node, status))

    async def _ainterrupt(self, node: CallNode, exc: BaseException) -> None:
        # Only a cancelled task may await here; a coroutine being closed (GeneratorExit) or a
        # KeyboardInterrupt settles synchronously.
        if not isinstance(exc, asyncio.CancelledError):
            self._interrupt(node, exc)
            return
        await self._asettled(node, lambda: self._interrupt(node, exc))

    async def _agate(self, node: CallNode, arguments: Any, editable: Any) -> None:
        """Ask the approval gates (awaited); a rejection closes the node: its settle is awaited."""
        owed = self._owe(node)
        try:
            await self._aapprove(node, arguments, editable)
        finally:
            if owed:
                await self._pay(node)
