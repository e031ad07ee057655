"""Which context an adapter call belongs to (the binding rule shared by every adapter)."""

from __future__ import annotations

import threading

from .config import ExecutionConfig
from .context import get_current_execution_context
from .execution import ExecutionContext


class ContextBinding:
    """Resolve, at call time: the explicit ``context``; else the current one (request middleware or
    an entered ``ExecutionContext``); else one context owned by this binding, built lazily from
    ``config`` (and ``on_limit``); else ``None`` (the call runs uncontained).
    """

    __slots__ = ("_explicit", "_config", "_owned", "_lock", "_on_limit")

    def __init__(
        self, context: ExecutionContext | None = None, config: ExecutionConfig | None = None,
        on_limit: object = None,
    ) -> None:  # fmt: skip
        if context is not None and not isinstance(context, ExecutionContext):
            raise TypeError(f"context must be an ExecutionContext, got {type(context).__name__}")
        if config is not None and not isinstance(config, ExecutionConfig):
            raise TypeError(f"config must be an ExecutionConfig, got {type(config).__name__}")
        self._explicit = context
        self._config = config
        self._owned: ExecutionContext | None = None
        self._on_limit = on_limit
        self._lock = threading.Lock()

    @property
    def explicit(self) -> ExecutionContext | None:
        return self._explicit

    def resolve(self) -> ExecutionContext | None:
        if self._explicit is not None:
            return self._explicit
        current = get_current_execution_context()
        if current is not None:
            return current
        if self._config is None:
            return None
        owned = self._owned
        if owned is None:
            with self._lock:
                if self._owned is None:
                    self._owned = ExecutionContext(self._config, on_limit=self._on_limit)
                owned = self._owned
        return owned

    @property
    def owned_context(self) -> ExecutionContext | None:
        """The context this binding created from ``config`` (None until first needed)."""
        return self._owned

    def reset_owned(self) -> None:
        """Start a fresh owned context, e.g. for a new agent run with the same adapter."""
        with self._lock:
            self._owned = None
