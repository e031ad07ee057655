"""Provider SDK instrumentation overhead per call. Prints JSON; ``python benchmarks/bench_providers.py``.

``--quick`` for a smoke run. Needs the ``openai`` SDK (``pip install "veronica-mw[openai]"``).
Figures are the best of several repeats, in microseconds per ``chat.completions.create`` call
unless named ``_ns``:

* ``passthrough_ns``: what the patched ``request`` adds outside any context (the check for a
  current context and one extra Python call), measured around a request that does nothing, so
  HTTP noise cannot hide it. The target is <= 1000 ns;
* ``adapter_work``: what it adds inside a context, measured the same way: plan the request,
  reserve its worst case, admit the step, read and price the usage, commit;
* ``in_process``: the real SDK with an in-memory transport answering a canned completion (no
  socket): ``bare`` (SDK not instrumented), ``outside`` (instrumented, no context) and ``inside``
  (instrumented, inside ``with ExecutionContext(...)``: planned, reserved from genai-prices,
  admitted, priced and committed per call);
* ``fake_server``: the same three against the tests' fake provider server over loopback HTTP
  (``tests/support/fake_provider.py``), where the network dominates.

``overhead_us`` is each figure minus ``bare`` of the same section; the three modes are interleaved
in every repeat, but on a busy machine end-to-end differences below ~50 us are noise (the isolated
figures above are the precise ones).
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai

import veronica_mw
from veronica_mw import ExecutionConfig, ExecutionContext

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
from fake_provider import FakeProvider  # noqa: E402

MESSAGES: list[Any] = [{"role": "user", "content": "benchmark"}]
COMPLETION = {
    "id": "chatcmpl-bench",
    "object": "chat.completion",
    "created": 0,
    "model": "gpt-4o-mini",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
}
LIMITS = ExecutionConfig(max_cost_usd=1e9, max_steps=10**9, max_retries_total=0)


def best_per_call(fn: Callable[[], Any], calls: int, repeats: int) -> float:
    """Best of ``repeats`` runs of ``calls`` calls, in seconds per call."""
    best = float("inf")
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def passthrough_ns(repeats: int) -> dict[str, float]:
    from veronica_mw.adapters import _provider_stainless as stainless
    from veronica_mw.adapters.openai import _Endpoints

    def request(self: Any, cast_to: Any, options: Any, **kwargs: Any) -> None:
        return None

    sdk = stainless.SDK(openai, _Endpoints())
    wrapped = stainless._sync_request(sdk)(request)
    calls = 200_000
    bare = best_per_call(lambda: request(None, None, None, stream=False), calls, repeats)
    patched = best_per_call(lambda: wrapped(None, None, None, stream=False), calls, repeats)
    return {"bare_ns": bare * 1e9, "patched_ns": patched * 1e9, "passthrough_ns": (patched - bare) * 1e9}


def section(client: openai.OpenAI, calls: int, repeats: int) -> dict[str, Any]:
    """bare / outside / inside, interleaved in every repeat (a shared machine drifts), best of each."""

    def call() -> None:
        client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, max_tokens=16)

    def run(mode: str) -> float:
        if mode == "bare":
            veronica_mw.uninstrument()
        else:
            veronica_mw.instrument("openai")
        gc.collect()
        start = time.perf_counter()
        if mode == "inside":
            with ExecutionContext(LIMITS):
                for _ in range(calls):
                    call()
        else:
            for _ in range(calls):
                call()
        return (time.perf_counter() - start) / calls * 1e6

    call()  # warm up: connections, pricing caches
    best = {"bare": float("inf"), "outside": float("inf"), "inside": float("inf")}
    for _ in range(repeats):
        for mode in best:
            best[mode] = min(best[mode], run(mode))
    veronica_mw.uninstrument()
    figures: dict[str, Any] = dict(best)
    figures["overhead_us"] = {
        "outside": best["outside"] - best["bare"],
        "inside": best["inside"] - best["bare"],
    }
    return figures


def adapter_work_us(repeats: int) -> dict[str, float]:
    """What an instrumented call does inside a context, without the SDK around it: plan the request
    (model, estimated tokens), reserve its worst case, admit the step, read the usage, price it and
    commit (the part of ``inside`` overhead that HTTP noise would hide)."""
    from openai._models import FinalRequestOptions, construct_type
    from openai.types.chat import ChatCompletion

    from veronica_mw.adapters import _provider_calls as calls
    from veronica_mw.adapters.openai import _Endpoints

    body = {"model": "gpt-4o-mini", "messages": MESSAGES, "max_tokens": 16}
    options = FinalRequestOptions(method="post", url="/chat/completions", json_data=body)
    result = construct_type(type_=ChatCompletion, value=COMPLETION)
    endpoints = _Endpoints()
    with ExecutionContext(LIMITS) as ctx:

        def one() -> None:
            planned = endpoints.plan(options)
            assert planned is not None
            plan, endpoint = planned
            call = calls.begin(ctx, plan)
            call.finish(endpoint.outcome(result), result)

        one()
        per_call = best_per_call(one, 20_000, repeats)
    return {"plan_admit_settle_us": per_call * 1e6}


def in_process(calls: int, repeats: int) -> dict[str, float]:
    transport_cls = getattr(openai.DefaultHttpxClient, "__mro__", ())[1]  # httpx2.Client or httpx.Client
    module = sys.modules[transport_cls.__module__.split(".")[0]]

    def answer(request: Any) -> Any:
        return module.Response(200, json=COMPLETION)

    http = openai.DefaultHttpxClient(transport=module.MockTransport(answer))
    client = openai.OpenAI(base_url="http://in-process/v1", api_key="bench", max_retries=0, http_client=http)
    try:
        return section(client, calls, repeats)
    finally:
        client.close()


def fake_server(calls: int, repeats: int) -> dict[str, float]:
    with FakeProvider() as server:
        client = openai.OpenAI(base_url=server.openai_url, api_key="bench", max_retries=0)
        try:
            return section(client, calls, repeats)
        finally:
            client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls (a smoke run)")
    args = parser.parse_args()
    calls, repeats = (50, 2) if args.quick else (1000, 5)
    report = {
        "python": platform.python_version(),
        "openai": openai.__version__,
        "passthrough": passthrough_ns(2 if args.quick else 7),
        "adapter_work": adapter_work_us(2 if args.quick else 7),
        "in_process": in_process(calls, repeats),
        "fake_server": fake_server(max(20, calls // 4), repeats),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
