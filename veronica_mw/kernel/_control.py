"""The kernel's side of verification and control: what ``veronica_mw.control`` plugs into.

The kernel knows no check and no approver, only two moments of a call: settling a model call, where
an :class:`OutputVerifier` passes the result or returns a :class:`Rejection` (the cost is committed
all the same: the call ran), and admitting a tool call, where each matching :class:`ApprovalGate`
gives a :class:`GateVerdict` before the tool runs. ``checks=[...]`` becomes a verifier with the
builder ``veronica_mw.control`` installs on import (``veronica_mw`` imports it)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ._node import CallNode

# ``ctx`` below is the :class:`~veronica_mw.ExecutionContext` asking (typed ``Any``: the context's
# module imports this one); implementations annotate it precisely.


@dataclass(frozen=True, slots=True)
class Rejection:
    """A failed check whose ``action`` is ``"retry"`` or ``"halt"`` (``"warn"`` never gets here)."""

    check: str
    message: str
    action: str = "retry"
    feedback: str = ""
    output: Any = None


@runtime_checkable
class OutputVerifier(Protocol):
    def verify(self, ctx: Any, node: CallNode, result: Any) -> Rejection | None: ...

    async def averify(self, ctx: Any, node: CallNode, result: Any) -> Rejection | None: ...


@dataclass(frozen=True, slots=True)
class GateVerdict:
    """An approval gate's answer: run the tool (with ``arguments`` when ``edited``), or not."""

    approved: bool
    message: str = ""
    on_reject: str = "halt"  # or "message": the tool call answers with ``message`` instead
    edited: bool = False
    arguments: Any = None
    gate: str = "approval"


@runtime_checkable
class ApprovalGate(Protocol):
    """A pipeline policy that must approve matching tool calls before they run."""

    def gates(self, tool: str) -> bool: ...

    def decide(self, ctx: Any, node: CallNode, arguments: Any) -> GateVerdict: ...

    async def adecide(self, ctx: Any, node: CallNode, arguments: Any) -> GateVerdict: ...


_builder: Callable[[tuple[Any, ...]], OutputVerifier] | None = None


def install_verifier_builder(builder: Callable[[tuple[Any, ...]], OutputVerifier]) -> None:
    """Called once by ``veronica_mw.control``: how ``checks=[...]`` becomes a verifier."""
    global _builder
    _builder = builder


def build_verifier(checks: Iterable[Any] | OutputVerifier | None) -> OutputVerifier | None:
    """The verifier for a context's ``checks=`` (a ready verifier is used as it is)."""
    if checks is None:
        return None
    if isinstance(checks, OutputVerifier):
        return checks
    if isinstance(checks, (str, bytes)) or not isinstance(checks, Iterable):
        raise TypeError(f"checks must be a list of checks, got {type(checks).__name__}")
    items = tuple(checks)
    if not items:
        return None
    if _builder is None:  # pragma: no cover - veronica_mw/__init__ imports the control layer
        raise RuntimeError("checks need veronica_mw.control; import veronica_mw first")
    return _builder(items)
