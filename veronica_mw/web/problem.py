"""Framework-free pieces shared by the ASGI and WSGI middlewares.

Both middlewares build their refusals with :func:`problem_response`, find a halt in an exception
chain with :func:`find_halt`, resolve each request's limits with :class:`ConfigResolver`, and use
the same applied-twice guard and budget-pool vocabulary, so HTTP behaviour cannot drift between
the two server interfaces.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ..kernel import observer as _obs
from ..kernel._control import build_verifier
from ..kernel.config import ExecutionConfig
from ..kernel.context import PendingContext, current_context
from ..kernel.exceptions import ExecutionHalted
from ..kernel.policy import PolicyPipeline, RuntimePolicy

if TYPE_CHECKING:
    from ..kernel.parent import BudgetParent
    from ..kernel.snapshot import ExecutionEvent, ExecutionSnapshot

logger = logging.getLogger("veronica_mw")

ConfigFactory = Callable[[Any], "ExecutionConfig | None"]
"""A callable of the ASGI scope (or WSGI environ) returning the request's limits, or None."""

WarnCallback = Callable[["ExecutionEvent"], Any]
"""The middlewares' ``on_warn``: called with each ``soft_limit`` event of a request's context."""

STRICT_DEFAULT = ExecutionConfig(max_cost_usd=0.0, max_steps=0, max_retries_total=0, timeout_ms=0)
"""Applied when a config callable fails and no ``default_config`` was given.

Fail closed: the limits were meant to come from the callable, so nothing is known about what this
request may spend. The request still runs (pages, health checks and anything that makes no model
or tool call are unaffected), but its first model or tool call is refused with ``step_limit``
and the client gets a 429. Failing open would let a broken tenant lookup spend without bound.
"""

_TITLES = {
    "budget_exceeded": "Cost budget exceeded",
    "step_limit": "Step limit reached",
    "retry_limit": "Retry budget exhausted",
    "timeout": "Time limit reached",
    "circuit_open": "Upstream circuit open",
    "policy_denied": "Denied by policy",
    "cancelled": "Execution cancelled",
    "verification_failed": "Model output failed verification",
}
PROBLEM_TYPE_PREFIX = "urn:veronica-mw:halt:"
PROBLEM_CONTENT_TYPE = b"application/problem+json"


# -- finding a halt ----------------------------------------------------------------------------------


def find_halt(exc: BaseException | None) -> ExecutionHalted | None:
    """Return ``exc`` if it is an :class:`ExecutionHalted`, else the first one reachable through
    ``__cause__``/``__context__`` or inside an exception group; None if there is none.

    Frameworks often re-raise their own exception from ours (``raise AppError() from halt``) or
    wrap it in a group (anyio task groups), so the halt may sit several links deep. Cycle-safe.
    """
    seen: set[int] = set()
    stack: list[BaseException] = [exc] if exc is not None else []
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, ExecutionHalted):
            return current
        # Push in reverse priority order: the explicit cause is examined before the implicit
        # context, and group members before either.
        if current.__context__ is not None:
            stack.append(current.__context__)
        if current.__cause__ is not None:
            stack.append(current.__cause__)
        # Duck-typed so the ``exceptiongroup`` backport (Python 3.10) is covered too.
        members = getattr(current, "exceptions", None)
        if isinstance(members, tuple):
            stack.extend(m for m in reversed(members) if isinstance(m, BaseException))
    return None


# -- the problem+json refusal ------------------------------------------------------------------------


def _header_bytes(value: str | bytes) -> bytes:
    return value if isinstance(value, bytes) else value.encode("latin-1")


def retry_after_header(retry_after_s: float | None) -> bytes | None:
    """``Retry-After`` in whole seconds, rounded up, at least 1; None when no retry could succeed."""
    if retry_after_s is None or not math.isfinite(retry_after_s) or retry_after_s < 0:
        return None
    return str(max(1, math.ceil(retry_after_s))).encode("ascii")


def problem_response(
    reason: str,
    *,
    snapshot: ExecutionSnapshot | None = None,
    config: ExecutionConfig | None = None,
    status: int | None = None,
    retry_after_s: float | None = None,
    detail: str = "",
    extra_headers: Iterable[tuple[str | bytes, str | bytes]] = (),
) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """Build an RFC 9457 ``application/problem+json`` refusal: ``(status, headers, body)``.

    The body's top-level ``reason`` is the halt reason code; usage (``steps_used``,
    ``cost_usd_used``, ``retries_used``) comes from ``snapshot`` and ``limits`` from the snapshot's
    config (or ``config`` when there is no snapshot, e.g. a refusal before the request ran).
    ``retry_after_s`` (falling back to ``snapshot.retry_after_s``) adds ``Retry-After``; it is only
    set by transient causes (an open circuit, a tenant budget window), never by a spent limit.
    Header names are lower-case bytes (ASGI); the WSGI middleware decodes them.
    """
    reason = str(reason)
    # A halt: 429; 503 when a fail-closed budget store was unavailable; 502 when the model's answer
    # failed a check (the upstream answer was unusable); 403 when a person rejected a tool call.
    if status is None:
        status = snapshot.http_status if snapshot is not None else 429
    if snapshot is not None:
        config = snapshot.config
        if retry_after_s is None:
            retry_after_s = snapshot.retry_after_s
        detail = detail or snapshot.abort_detail
    limits: dict[str, float | int | None]
    if config is not None:
        limits = dict(config.as_dict())
    else:
        limits = dict.fromkeys(("max_steps", "max_cost_usd", "max_retries_total", "timeout_ms"))
    title = _TITLES.get(reason, "Execution halted")
    body = {
        "type": PROBLEM_TYPE_PREFIX + reason,
        "title": title,
        "status": status,
        "detail": detail or title,
        "reason": reason,
        "steps_used": snapshot.step_count if snapshot is not None else 0,
        "cost_usd_used": round(snapshot.cost_usd_accumulated, 9) if snapshot is not None else 0.0,
        "retries_used": snapshot.retries_used if snapshot is not None else 0,
        "limits": limits,
    }
    if snapshot is not None:
        body["chain_id"] = snapshot.chain_id
        if reason == "verification_failed":
            body.update(_failed_check(snapshot))
    payload = json.dumps(body, separators=(",", ":")).encode("utf-8")
    headers = [
        (b"content-type", PROBLEM_CONTENT_TYPE),
        (b"content-length", str(len(payload)).encode("ascii")),
        (b"cache-control", b"no-store"),
    ]
    retry_after = retry_after_header(retry_after_s)
    if retry_after is not None:
        headers.append((b"retry-after", retry_after))
    for name, value in extra_headers:
        headers.append((_header_bytes(name).lower(), _header_bytes(value)))
    return status, headers, payload


def _failed_check(snapshot: ExecutionSnapshot) -> dict[str, Any]:
    """The check that halted the run (its ``check_failed`` event), for the 502 body."""
    for event in reversed(snapshot.events):
        if event.kind == "check_failed" and event.data.get("on_fail") == "halt":
            return {"check": event.data.get("check"), "check_message": event.data.get("message")}
    return {}


def usage_headers(snapshot: ExecutionSnapshot) -> list[tuple[bytes, bytes]]:
    """Optional response headers reporting what the request used (``usage_headers=True``)."""
    config = snapshot.config
    return [
        (b"x-veronica-steps", f"{snapshot.step_count}/{config.max_steps}".encode("ascii")),
        (b"x-veronica-cost-usd", f"{snapshot.cost_usd_accumulated:.6f}/{config.max_cost_usd:g}".encode()),
        (b"x-veronica-retries", f"{snapshot.retries_used}/{config.max_retries_total}".encode("ascii")),
        (b"x-veronica-chain-id", snapshot.chain_id.encode("ascii")),
        *_warning_header(snapshot),
    ]


def _warning_header(snapshot: ExecutionSnapshot) -> list[tuple[bytes, bytes]]:
    """``x-veronica-warning: cost 0.8, steps 0.5``: the highest soft limit passed per dimension."""
    if not snapshot.soft_limits:
        return []
    highest: dict[str, float] = {}
    for dimension, fraction in snapshot.soft_limits:
        highest[dimension] = max(fraction, highest.get(dimension, 0.0))
    value = ", ".join(f"{dimension} {fraction:g}" for dimension, fraction in highest.items())
    return [(b"x-veronica-warning", value.encode("ascii"))]


def log_halt_after_start(reason: str | None, path: str, chain_id: str, detail: str = "") -> None:
    """The one WARNING both middlewares log when a halt arrives after the response has started."""
    logger.warning(
        "veronica_mw: %s halted after the response started (reason=%s%s); stream ended early [chain %s]",
        path,
        reason,
        f", {detail}" if detail else "",
        chain_id,
    )


# -- per-request configuration -----------------------------------------------------------------------


class ConfigResolver:
    """Turns the middleware's ``config``/``default_config``/``exclude_paths`` options into the limits
    of one request.

    ``config`` is an :class:`ExecutionConfig` (every request gets a fresh context with it) or a
    callable of the scope/environ returning one, or None to leave that request uncontained. A
    callable that raises or returns anything else is logged (logger ``veronica_mw``, with the
    traceback) and ``default_config`` applies, or :data:`STRICT_DEFAULT` if none was given.
    ``exclude_paths`` entries ending in ``/`` are prefixes (``"/static/"``); others match exactly.
    """

    __slots__ = ("_static", "_factory", "_default", "_exact", "_prefixes")

    def __init__(
        self,
        config: ExecutionConfig | ConfigFactory,
        *,
        default_config: ExecutionConfig | None = None,
        exclude_paths: Iterable[str] = (),
    ) -> None:
        if isinstance(config, ExecutionConfig):
            self._static: ExecutionConfig | None = config
            self._factory: ConfigFactory | None = None
        elif callable(config):
            self._static, self._factory = None, config
        else:
            raise TypeError(f"config must be an ExecutionConfig or a callable, got {type(config).__name__}")
        if default_config is not None and not isinstance(default_config, ExecutionConfig):
            raise TypeError(f"default_config must be an ExecutionConfig, got {type(default_config).__name__}")
        self._default = default_config if default_config is not None else STRICT_DEFAULT
        if isinstance(exclude_paths, str):
            raise TypeError("exclude_paths must be a collection of paths, not one string")
        paths = tuple(exclude_paths)
        for path in paths:
            if not isinstance(path, str) or not path.startswith("/"):
                raise ValueError(f"exclude_paths entries must be str paths starting with '/', got {path!r}")
        self._exact = frozenset(p for p in paths if not p.endswith("/") or p == "/")
        self._prefixes = tuple(p for p in paths if p.endswith("/") and p != "/")

    @property
    def default_config(self) -> ExecutionConfig:
        return self._default

    @property
    def excludes(self) -> bool:
        """True when some paths are excluded."""
        return bool(self._exact or self._prefixes)

    def excluded(self, path: str) -> bool:
        """True when ``path`` is listed in ``exclude_paths`` (exactly, or under a ``/``-prefix)."""
        return path in self._exact or (bool(self._prefixes) and path.startswith(self._prefixes))

    def resolve(self, request: Any, path: str) -> ExecutionConfig | None:
        """The limits for this request (``request`` is the scope or environ), or None to skip it."""
        if self._exact or self._prefixes:
            if self.excluded(path):
                return None
        if self._static is not None:
            return self._static
        try:
            result = self._factory(request)  # type: ignore[misc]
        except Exception:
            logger.exception("veronica_mw: config callable failed for %s; applying the default config", path)
            return self._default
        if result is None or isinstance(result, ExecutionConfig):
            return result
        logger.error(
            "veronica_mw: config callable returned %s for %s, not an ExecutionConfig or None; "
            "applying the default config",
            type(result).__name__,
            path,
        )
        return self._default


def context_options(
    checks: Iterable[Any] = (),
    policies: Iterable[RuntimePolicy] = (),
    audit: _obs.Observer | None = None,
    on_warn: WarnCallback | None = None,
    on_limit: Any = None,
) -> dict[str, Any] | None:
    """The ``checks=``/``policies=``/``audit=``/``on_warn=``/``on_limit=`` of a middleware as keyword
    arguments for every request's :class:`~veronica_mw.ExecutionContext` (built and validated once; None
    when all are empty).

    The pipeline and the checks are shared by all requests: policies decide from what each call's
    context tells them, and checks hold no per-call state.
    """
    if isinstance(checks, (str, bytes)) or isinstance(policies, (str, bytes)):
        raise TypeError("checks and policies must be lists")
    verifier = build_verifier(checks)
    pipeline = PolicyPipeline(policies)
    options: dict[str, Any] = {}
    if verifier is not None:
        options["checks"] = verifier
    if len(pipeline):
        options["pipeline"] = pipeline
    if audit is not None:
        if not isinstance(audit, _obs.Observer):
            raise TypeError(f"audit must be a veronica_mw.AuditLog (an Observer), got {type(audit).__name__}")
        options["audit"] = audit
    if on_warn is not None:
        if not callable(on_warn):
            raise TypeError(f"on_warn must be callable (event) -> None, got {type(on_warn).__name__}")
        options["on_warn"] = on_warn
    if on_limit is not None:
        if not callable(getattr(on_limit, "aask", None)):
            raise TypeError(f"on_limit must be a veronica_mw.AskForMore, got {type(on_limit).__name__}")
        options["on_limit"] = on_limit  # one AskForMore; each request's context asks on its own
    return options or None


def middleware_active() -> bool:
    """True while a veronica-mw middleware handles the current request.

    Every middleware puts the request's :class:`~veronica_mw.kernel.context.PendingContext` in the context
    ContextVar for the duration of the request, and nothing else puts one there: an inner copy (the
    user wrapped the app and also added the middleware) sees it and passes the request straight
    through, so the request has one context, one 429 and one count of every step. A context the
    user entered (``with ExecutionContext(...)``) is not a request's and does not count.
    """
    return isinstance(current_context.get(), PendingContext)


# -- the budget-pool hook ---------------------------------------------------------------------------


class Admission(Protocol):
    """A budget pool's answer for one request (implemented by the tenant-pool module)."""

    @property
    def allowed(self) -> bool: ...
    @property
    def status(self) -> int: ...  # 429 (over budget) or 503 (pool unavailable)
    @property
    def reason(self) -> str: ...
    @property
    def retry_after_s(self) -> float | None: ...
    # e.g. RateLimit headers: sent on the refusal AND added to a normal response.
    @property
    def headers(self) -> list[tuple[str, str]]: ...
    # Becomes the request context's budget_parent; None when the request has no tenant.
    @property
    def ledger(self) -> BudgetParent | None: ...


class AsyncBudgetPool(Protocol):
    """What the ASGI middleware's ``budget_pool`` option needs."""

    async def aadmit(self, scope: Any) -> Admission: ...


class SyncBudgetPool(Protocol):
    """What the WSGI middleware's ``budget_pool`` option needs."""

    def admit(self, environ: Any) -> Admission: ...


@dataclass(frozen=True)
class PoolFailure:
    """The admission used when the budget pool itself raised: refuse with 503, fail closed.

    Admitting would let requests spend against a budget nobody can check; a clear 503 problem
    response is a well-formed answer the client can retry.
    """

    detail: str
    allowed: bool = False
    status: int = 503
    reason: str = "policy_denied"
    retry_after_s: float | None = 1.0
    headers: list[tuple[str, str]] = field(default_factory=list)
    ledger: BudgetParent | None = None


def pool_failure(exc: BaseException, path: str) -> PoolFailure:
    """Log a failing budget pool (with traceback) and return the refusal to send instead."""
    logger.exception("veronica_mw: budget pool failed for %s; refusing with 503", path, exc_info=exc)
    return PoolFailure(detail=f"budget pool unavailable ({type(exc).__name__})")


def refusal_response(
    adm: Admission, config: ExecutionConfig | None, observers: tuple[_obs.Observer, ...] = ()
) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """The problem response for a pool refusal (before the app ran: nothing used yet).

    Every middleware answers a refusal through here, so this is where observers hear of it: the
    global ones and the middleware's own (its audit log)."""
    detail = getattr(adm, "detail", "") or f"admission refused: {adm.reason}"
    if _obs._global or observers:
        _obs.notify(observers, "refused", adm.reason, detail, adm.status)
    return problem_response(
        adm.reason,
        config=config,
        status=adm.status,
        retry_after_s=adm.retry_after_s,
        detail=detail,
        extra_headers=adm.headers,
    )
