"""What ``veronica-mw run`` switches on around the program: every SDK and framework adapter, and
context inheritance for the threads the program starts.

Nothing is imported eagerly: each SDK is patched and each framework adapter installed right after
the program imports it (``veronica_mw._post_import``), so a script that uses none of them pays for
none. This is exactly what ``veronica_mw.instrument()`` does in process: the same adapters (the
provider SDKs, MCP, and every supported framework: Pydantic AI, the Agents SDK, LangChain,
LlamaIndex, CrewAI, AG2 0.14 and 1.x), bound to the execution context current at each call, so
a program counts the same under ``veronica-mw run`` as under ``instrument()``.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from typing import Any

from ..instrumentation import instrument


def instrument_everything() -> tuple[str, ...]:
    """Instrument every installed SDK and framework (lazily); return their names."""
    return instrument()


def inherit_context_in_threads() -> Callable[[], None]:
    """Make every thread started from now on run in a copy of its starter's contextvars context
    (Python < 3.14 starts threads in an empty one), so the program's worker threads and thread
    pools see the run's execution context. Returns the undo."""
    original = threading.Thread.start

    def start(self: threading.Thread, *args: Any, **kwargs: Any) -> None:
        context = contextvars.copy_context()
        run = self.run
        self.run = lambda: context.run(run)  # type: ignore[method-assign]
        original(self, *args, **kwargs)

    threading.Thread.start = start  # type: ignore[method-assign]

    def undo() -> None:
        threading.Thread.start = original  # type: ignore[method-assign]

    return undo
