from __future__ import annotations

from collections.abc import Iterator

from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse

from veronica_mw import WrapOptions, get_current_execution_context


def fake_model(prompt: str) -> dict[str, object]:
    return {"text": f"echo: {prompt}", "usage": {"input_tokens": 12, "output_tokens": 30}}


def ask(prompt: str) -> str:
    ctx = get_current_execution_context()  # also request.META["veronica.context"]
    assert ctx is not None
    reply = ctx.call_llm(fake_model, prompt, options=WrapOptions(cost_estimate_hint=0.001))
    return str(reply["text"])


def agent(request: HttpRequest) -> JsonResponse:
    turns = int(request.GET.get("turns", "3"))
    answers = [ask(f"turn {i}") for i in range(turns)]  # ExecutionHalted here becomes the 429
    return JsonResponse({"answers": answers})


def stream(request: HttpRequest) -> StreamingHttpResponse:
    turns = int(request.GET.get("turns", "3"))

    def tokens() -> Iterator[bytes]:
        for i in range(turns):
            yield (ask(f"turn {i}") + "\n").encode()

    return StreamingHttpResponse(tokens(), content_type="text/plain")


def health(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")
