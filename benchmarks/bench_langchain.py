"""LangChain adapter overhead per model call. Prints JSON; ``python benchmarks/bench_langchain.py [--quick]``.

A fake chat model (LangChain's ``FakeMessagesListChatModel`` answering with usage and a priced
model name) is invoked in a tight loop. Figures are the best of several repeats, in microseconds
per model call:

* ``baseline``: LangChain alone, measured *before* the adapter is imported (importing it
  registers the zero-config hook process-wide);
* ``hook_idle``: adapter imported, no execution context current (the hook handler is attached
  but does nothing);
* ``hook_active``: inside ``with ExecutionContext(...)``: one step begun, priced and committed
  per call;
* ``explicit_and_hook``: an explicit ``VeronicaCallbackHandler`` as well (deduplicated by run id).

``overhead_us`` is each figure minus the baseline of the same (sync/async) path.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import platform
import sys
import time
from collections.abc import Callable
from typing import Any

import langchain_core
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig

from veronica_mw import ExecutionConfig, ExecutionContext


def make_model() -> FakeMessagesListChatModel:
    usage: Any = {"input_tokens": 1000, "output_tokens": 500, "total_tokens": 1500}
    message = AIMessage(content="ok", usage_metadata=usage, response_metadata={"model_name": "gpt-4o"})
    return FakeMessagesListChatModel(responses=[message])


def per_call_us(fn: Callable[[int], None], n: int, repeats: int) -> float:
    fn(max(1, n // 10))  # warm caches (pricing lookup, pydantic models)
    samples = []
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        fn(n)
        samples.append((time.perf_counter() - start) / n * 1e6)
    # The fastest repeat: least disturbed by other load on a shared machine.
    return round(min(samples), 2)


def sync_loop(
    config: RunnableConfig | None = None, ctx: ExecutionContext | None = None
) -> Callable[[int], None]:
    model = make_model()

    def run(n: int) -> None:
        if ctx is None:
            for _ in range(n):
                model.invoke("hi", config=config)
        else:
            with ctx:
                for _ in range(n):
                    model.invoke("hi", config=config)

    return run


def async_loop(
    config: RunnableConfig | None = None, ctx: ExecutionContext | None = None
) -> Callable[[int], None]:
    model = make_model()

    async def calls(n: int) -> None:
        for _ in range(n):
            await model.ainvoke("hi", config=config)

    async def main(n: int) -> None:
        if ctx is None:
            await calls(n)
        else:
            async with ctx:
                await calls(n)

    return lambda n: asyncio.run(main(n))


def big_context() -> ExecutionContext:
    return ExecutionContext(ExecutionConfig(max_cost_usd=1e12, max_steps=10**12, max_retries_total=0))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer calls (smoke run)")
    args = parser.parse_args()
    n, repeats = (200, 3) if args.quick else (2000, 5)

    results: dict[str, dict[str, float]] = {"sync": {}, "async": {}}
    results["sync"]["baseline"] = per_call_us(sync_loop(), n, repeats)
    results["async"]["baseline"] = per_call_us(async_loop(), n, repeats)

    from veronica_mw.adapters.langchain import VeronicaCallbackHandler

    for mode, loop in (("sync", sync_loop), ("async", async_loop)):
        ctx = big_context()
        explicit: RunnableConfig = {"callbacks": [VeronicaCallbackHandler(ctx)]}
        results[mode]["hook_idle"] = per_call_us(loop(), n, repeats)
        results[mode]["hook_active"] = per_call_us(loop(ctx=big_context()), n, repeats)
        results[mode]["explicit_and_hook"] = per_call_us(loop(explicit, ctx), n, repeats)

    report = {
        "benchmark": "langchain_adapter_overhead_per_model_call",
        "unit": "microseconds",
        "calls_per_sample": n,
        "repeats": repeats,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "langchain_core": langchain_core.__version__,
        "results": results,
        "overhead_us": {
            mode: {k: round(v - figures["baseline"], 2) for k, v in figures.items() if k != "baseline"}
            for mode, figures in results.items()
        },
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
