"""A project middleware that lets ``ExecutionHalted`` escape from middleware code (not the view):
Django's handler turns that into a 500 without calling ``process_exception``."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from veronica_mw import get_current_execution_context


class HaltingMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path == "/middleware-halt":
            ctx = get_current_execution_context()
            assert ctx is not None
            ctx.cancel("halted by a project middleware")
            ctx.check()
        return self.get_response(request)
