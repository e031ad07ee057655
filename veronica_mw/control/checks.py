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
    """Every answer is valid JSON; with ``schema`` (a JSON Schema dict, or a pydantic model class),
    valid against it. A single Markdown code fence around the whole answer is ignored.

    Reads every tool call's arguments when the answer has tool calls (text beside them, such as
    Anthropic's "I'll send it now.", is commentary), otherwise every choice's text.

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
        answers = [(f"tool call {c.name!r}", c.arguments) for c in output.tool_calls]
        if not answers:
            answers = [(f"choice {i}", t) for i, t in enumerate(output.texts or ("",))]
        many = len(answers) > 1
        for where, text in answers:
            failed = self._check(text)
            if failed is not None:
                return CheckResult(False, self.name, f"{where}: {failed}" if many else failed)
        return CheckResult(True, self.name)

    def _check(self, text: str) -> str | None:
        fenced = _FENCE.match(text)
        if fenced is not None:
            text = fenced.group("body")
        try:
            data = json.loads(text)
        except ValueError as exc:
            return f"not valid JSON: {exc}"
        except RecursionError:
            return "not valid JSON: nested too deeply"
        if self._validator is not None:
            error = importlib.import_module("jsonschema").exceptions.best_match(
                self._validator.iter_errors(data)
            )
            if error is not None:
                where = "/".join(str(p) for p in error.absolute_path)
                return f"JSON does not match the schema at /{where}: {error.message}"
        elif self._schema is not None:
            try:
                self._schema.model_validate(data)  # type: ignore[union-attr]
            except ValueError as exc:  # pydantic's ValidationError is a ValueError
                name = getattr(self._schema, "__name__", "the model")
                return f"JSON does not match {name}: {_pydantic_errors(exc)}"
        return None

    def __repr__(self) -> str:
        return f"JsonOutput(schema={self._schema!r})"


class MaxLength:
    """Every choice's text, and every tool call's arguments (JSON text), has at most ``chars``
    characters."""

    name = "max_length"

    def __init__(self, chars: int) -> None:
        if isinstance(chars, bool) or not isinstance(chars, int) or chars < 0:
            raise ValueError(f"chars must be an int >= 0, got {chars!r}")
        self.chars = chars

    def __call__(self, output: ModelOutput) -> CheckResult:
        many = len(output.texts) + len(output.tool_calls) > 1
        for where, text in output.parts():
            if " name" in where or len(text) <= self.chars:
                continue
            message = f"{len(text)} characters, more than {self.chars}"
            return CheckResult(False, self.name, f"{where}: {message}" if many else message)
        return CheckResult(True, self.name)

    def __repr__(self) -> str:
        return f"MaxLength({self.chars})"


class Forbidden:
    """No part of the output matches any of ``regexes`` (``re.search``; ``flags`` for all of them):
    every choice's text, every tool call's name and its arguments as JSON text (also with JSON's
    ``\\u`` escapes decoded, so an escaped secret is still found)."""

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
        parts = list(output.parts())
        for where, text in parts:
            for pattern in self.patterns:
                if pattern.search(text) is not None:
                    message = f"matches the forbidden pattern {pattern.pattern!r}"
                    return CheckResult(False, self.name, f"{where} {message}" if len(parts) > 1 else message)
        return CheckResult(True, self.name)

    def __repr__(self) -> str:
        return f"Forbidden({', '.join(repr(p.pattern) for p in self.patterns)})"
