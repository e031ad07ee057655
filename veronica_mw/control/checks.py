"""Output checks: ``CheckResult`` and the built-in checks ``JsonOutput``, ``MaxLength``, ``Forbidden``.

A check is any callable ``(output: ModelOutput) -> CheckResult | bool | None`` (None or True pass),
sync, or async for async calls. Give checks to ``ExecutionContext(checks=[...])`` or to a
middleware's ``checks=``, each as ``check`` or ``(check, on_fail)`` with ``on_fail`` one of
``"retry"`` (default), ``"halt"``, ``"warn"`` (see :mod:`veronica_mw.control._suite`).
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..kernel.exceptions import MissingFrameworkError
from .outputs import ModelOutput

__all__ = ["CheckResult", "Forbidden", "JsonOutput", "MaxLength"]


@dataclass(frozen=True, slots=True)
class CheckResult:
    """What one check said about one output. ``score`` is optional (e.g. an evaluator's 0..1)."""

    passed: bool
    name: str
    message: str = ""
    score: float | None = None


# A single fenced block around the whole answer (```json ... ```), as chat models like to send.
_FENCE = re.compile(r"\A\s*```[A-Za-z0-9_-]*[ \t]*\r?\n(?P<body>.*?)\r?\n?```\s*\Z", re.DOTALL)


def _is_model_class(schema: Any) -> bool:
    return isinstance(schema, type) and callable(getattr(schema, "model_validate", None))


def _pydantic_errors(exc: ValueError) -> str:
    errors = getattr(exc, "errors", None)
    if not callable(errors):
        return str(exc)
    items = []
    for error in errors()[:5]:
        where = ".".join(str(p) for p in error.get("loc", ())) or "(root)"
        items.append(f"{where}: {error.get('msg')}")
    return "; ".join(items)


class JsonOutput:
    """The output is valid JSON; with ``schema`` (a JSON Schema dict, or a pydantic model class),
    valid against it. A single Markdown code fence around the whole answer is ignored.

    JSON Schema validation uses the ``jsonschema`` package (``pip install "veronica-mw[control]"``).
    """

    name = "json_output"

    def __init__(self, schema: Mapping[str, Any] | type | None = None) -> None:
        self._schema = schema
        self._validator: Any = None
        if schema is None or _is_model_class(schema):
            return
        if not isinstance(schema, Mapping):
            raise TypeError(f"schema must be a JSON Schema dict or a pydantic model class, got {schema!r}")
        try:
            jsonschema = importlib.import_module("jsonschema")  # optional: the "control" extra
        except ImportError as exc:
            raise MissingFrameworkError(
                "jsonschema", "control", exc, module="veronica_mw.JsonOutput(schema=...)"
            ) from exc
        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)  # a broken schema is a startup error, not a failed answer
        self._validator = cls(schema)

    def __call__(self, output: ModelOutput) -> CheckResult:
        text = output.text
        fenced = _FENCE.match(text)
        if fenced is not None:
            text = fenced.group("body")
        try:
            data = json.loads(text)
        except ValueError as exc:
            return CheckResult(False, self.name, f"not valid JSON: {exc}")
        if self._validator is not None:
            error = importlib.import_module("jsonschema").exceptions.best_match(
                self._validator.iter_errors(data)
            )
            if error is not None:
                where = "/".join(str(p) for p in error.absolute_path)
                message = f"JSON does not match the schema at /{where}: {error.message}"
                return CheckResult(False, self.name, message)
        elif self._schema is not None:
            try:
                self._schema.model_validate(data)  # type: ignore[union-attr]
            except ValueError as exc:  # pydantic's ValidationError is a ValueError
                name = getattr(self._schema, "__name__", "the model")
                return CheckResult(False, self.name, f"JSON does not match {name}: {_pydantic_errors(exc)}")
        return CheckResult(True, self.name)

    def __repr__(self) -> str:
        return f"JsonOutput(schema={self._schema!r})"


class MaxLength:
    """The output's text has at most ``chars`` characters."""

    name = "max_length"

    def __init__(self, chars: int) -> None:
        if isinstance(chars, bool) or not isinstance(chars, int) or chars < 0:
            raise ValueError(f"chars must be an int >= 0, got {chars!r}")
        self.chars = chars

    def __call__(self, output: ModelOutput) -> CheckResult:
        length = len(output.text)
        if length > self.chars:
            return CheckResult(False, self.name, f"{length} characters, more than {self.chars}")
        return CheckResult(True, self.name)

    def __repr__(self) -> str:
        return f"MaxLength({self.chars})"


class Forbidden:
    """The output's text matches none of ``regexes`` (``re.search``; ``flags`` for all of them)."""

    name = "forbidden"

    def __init__(self, *regexes: str | re.Pattern[str], flags: int = 0) -> None:
        if not regexes:
            raise ValueError("Forbidden needs at least one regex")
        patterns = []
        for regex in regexes:
            if isinstance(regex, re.Pattern):
                patterns.append(regex)
            elif isinstance(regex, str):
                patterns.append(re.compile(regex, flags))  # re.error for a bad pattern, at startup
            else:
                raise TypeError(f"regexes must be str or compiled patterns, got {regex!r}")
        self.patterns = tuple(patterns)

    def __call__(self, output: ModelOutput) -> CheckResult:
        text = output.text
        for pattern in self.patterns:
            if pattern.search(text) is not None:
                return CheckResult(False, self.name, f"matches the forbidden pattern {pattern.pattern!r}")
        return CheckResult(True, self.name)

    def __repr__(self) -> str:
        return f"Forbidden({', '.join(repr(p.pattern) for p in self.patterns)})"
