"""Flask + veronica-mw: every request gets its own hard budget (cost, steps, retries, time).

Run:  python examples/flask_app.py            (then: curl -i localhost:5000/agent?turns=3)
      curl -i localhost:5000/agent?turns=9    -> 429 application/problem+json, reason "step_limit"
      curl -N localhost:5000/stream?turns=9   -> streams 5 lines, then ends cleanly (logged)

The "model" is a local stand-in so the example needs no API key; replace ``fake_model`` with your
client call (OpenAI, Anthropic, LangChain...) and pass ``model=`` so real token usage is priced.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from flask import Flask, Response, request, stream_with_context

from veronica_mw import ExecutionConfig, WrapOptions, get_current_execution_context
from veronica_mw.web.wsgi import VeronicaWSGIMiddleware

app = Flask(__name__)


def fake_model(prompt: str) -> dict[str, object]:
    return {"text": f"echo: {prompt}", "usage": {"input_tokens": 12, "output_tokens": 30}}


def ask(prompt: str) -> str:
    ctx = get_current_execution_context()  # the request's context, set by the middleware
    assert ctx is not None
    reply = ctx.call_llm(fake_model, prompt, options=WrapOptions(cost_estimate_hint=0.001))
    return str(reply["text"])


@app.get("/agent")
def agent() -> dict[str, object]:
    turns = int(request.args.get("turns", "3"))
    answers = [ask(f"turn {i}") for i in range(turns)]  # ExecutionHalted here becomes the 429
    ctx = get_current_execution_context()
    assert ctx is not None
    return {"answers": answers, "usage": ctx.get_snapshot().as_dict()}


@app.get("/stream")
def stream() -> Response:
    turns = int(request.args.get("turns", "3"))

    def tokens() -> Iterator[str]:
        for i in range(turns):  # the same context stays current on every chunk
            yield ask(f"turn {i}") + "\n"

    return Response(stream_with_context(tokens()), mimetype="text/plain")


@app.get("/health")
def health() -> str:
    return "ok"


def limits_for(environ: dict[str, object]) -> ExecutionConfig | None:
    """Per-request limits: a paid plan header gets more room."""
    if environ.get("HTTP_X_PLAN") == "pro":
        return ExecutionConfig(max_cost_usd=1.00, max_steps=50, max_retries_total=3, timeout_ms=60_000)
    return ExecutionConfig(max_cost_usd=0.05, max_steps=5, max_retries_total=1, timeout_ms=15_000)


app.wsgi_app = VeronicaWSGIMiddleware(  # type: ignore[method-assign]
    app.wsgi_app, config=limits_for, exclude_paths=["/health"], usage_headers=True
)

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    app.run(port=5000, threaded=True)
