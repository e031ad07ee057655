"""FastAPI dependency giving an endpoint the execution context of its request.

::

    from fastapi import Depends
    from veronica_mw.adapters.fastapi import current_execution_context

    @app.post("/chat")
    async def chat(ctx: ExecutionContext = Depends(current_execution_context)): ...

or, with the ready-made ``Annotated`` alias, ``async def chat(ctx: CurrentExecutionContext): ...``.
This module does not import FastAPI until ``CurrentExecutionContext`` is first used, so importing
it costs nothing in apps that never touch the alias.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..kernel.context import get_current_execution_context
from ..kernel.execution import ExecutionContext

if TYPE_CHECKING:
    from typing import Annotated

    # What type checkers see; at runtime the alias carries ``Depends(current_execution_context)``.
    CurrentExecutionContext = Annotated[ExecutionContext, "Depends(current_execution_context)"]

__all__ = ["CurrentExecutionContext", "current_execution_context"]


def current_execution_context() -> ExecutionContext:
    """Return the current request's :class:`ExecutionContext`.

    Raises ``RuntimeError`` when there is none: the app is not wrapped by
    ``VeronicaASGIMiddleware``, the path is excluded, or the config callable returned None.
    """
    ctx = get_current_execution_context()
    if ctx is None:
        raise RuntimeError(
            "no veronica-mw execution context for this request: add VeronicaASGIMiddleware to the app "
            "(app.add_middleware(VeronicaASGIMiddleware, config=ExecutionConfig(...))), and check that "
            "the path is not in exclude_paths and the config callable does not return None for it"
        )
    return ctx


def __getattr__(name: str) -> Any:
    # Built lazily so that importing this module never imports FastAPI.
    if name == "CurrentExecutionContext":
        from typing import Annotated

        try:
            from fastapi import Depends
        except ImportError as exc:
            from ..kernel.exceptions import MissingFrameworkError

            raise MissingFrameworkError(
                "FastAPI", "fastapi", exc, module="veronica_mw.adapters.fastapi"
            ) from exc
        alias = Annotated[ExecutionContext, Depends(current_execution_context)]
        globals()[name] = alias
        return alias
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
