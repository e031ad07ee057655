"""LangChain adapter overhead per model call. Prints JSON; ``python benchmarks/bench_langchain.py [--quick]``.

A fake chat model (LangChain's ``FakeMessagesListChatModel`` answering with usage and a priced
model name, with a native ``_agenerate``) is invoked in a tight loop. Figures are the best of
several interleaved rounds, in microseconds per model call (``--processes N``: the median of N
fresh processes):

* ``baseline``: LangChain alone, measured *before* the adapter is imported (importing it
  registers the zero-config hook process-wide);
* ``hook_idle``: adapter imported, no execution context current (the hook handler is attached
  but does nothing);
* ``hook_active``: inside ``with ExecutionContext(...)``: one step begun, priced and committed
  per call;
* ``explicit_and_hook``: an explicit ``VeronicaCallbackHandler`` as well (deduplicated by run id);
* ``minimal_counting_handler``: no adapter work, only a handler that counts starts and ends (an
  ``AsyncCallbackHandler`` on the async path, a ``BaseCallbackHandler`` on the sync one) -- the
  least any callback-based containment costs.

``overhead_us`` is each figure minus the baseline of the same (sync/async) path. ``ratios`` compares
the issue's targets in the same run: the async idle hook's overhead (target <= 10 us), the async
in-context overhead over the sync handler's in-context overhead (<= 2) and over the minimal
counting async handler's overhead (<= 2).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import langchain_core
from langchain_core.callbacks import AsyncCallbackHandler, BaseCallbackHandler
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatResult
from langchain_core.runnables import RunnableConfig

from veronica_mw import ExecutionConfig, ExecutionContext


class AsyncFakeChatModel(FakeMessagesListChatModel):
    """LangChain's list fake with a native ``_agenerate``, like a real provider: without it
    LangChain runs ``_generate`` in its executor, a thread hop that would swamp what we measure."""

    async def _agenerate(
        self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        return self._generate(messages, stop, None, **kwargs)


def make_model() -> FakeMessagesListChatModel:
    usage: Any = {"input_tokens": 1000, "output_tokens": 500, "total_tokens": 1500}
    message = AIMessage(content="ok", usage_metadata=usage, response_metadata={"model_name": "gpt-4o"})
    return AsyncFakeChatModel(responses=[message])


def interleaved(loops: dict[str, Callable[[int], None]], n: int, rounds: int) -> dict[str, float]:
    """Microseconds per call of each loop: the fastest of ``rounds`` interleaved rounds (a burst of
    load on a shared machine hits every loop alike; the fastest round is the least disturbed)."""
    for fn in loops.values():
        fn(max(1, n // 10))  # warm caches (pricing lookup, pydantic models)
    samples: dict[str, list[float]] = {name: [] for name in loops}
    for _ in range(rounds):
        for name, fn in loops.items():
            gc.collect()
            start = time.perf_counter()
            fn(n)
            samples[name].append((time.perf_counter() - start) / n * 1e6)
    return {name: round(min(values), 2) for name, values in samples.items()}


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


class CountingHandler(BaseCallbackHandler):
    def __init__(self) -> None:
        self.events = 0

    def on_chat_model_start(self, serialized: Any, messages: Any, **kwargs: Any) -> None:
        self.events += 1

    def on_llm_end(self, response: Any, **kwargs: Any) -> None:
        self.events += 1


class AsyncCountingHandler(AsyncCallbackHandler):
    def __init__(self) -> None:
        self.events = 0

    async def on_chat_model_start(self, serialized: Any, messages: Any, **kwargs: Any) -> None:
        self.events += 1

    async def on_llm_end(self, response: Any, **kwargs: Any) -> None:
        self.events += 1


def big_context() -> ExecutionContext:
    return ExecutionContext(ExecutionConfig(max_cost_usd=1e12, max_steps=10**12, max_retries_total=0))


def measure(n: int, rounds: int) -> dict[str, dict[str, float]]:
    counting_sync: RunnableConfig = {"callbacks": [CountingHandler()]}
    counting_async: RunnableConfig = {"callbacks": [AsyncCountingHandler()]}
    # Before the adapter is imported (importing it registers the zero-config hook process-wide).
    first = interleaved(
        {
            "sync.baseline": sync_loop(),
            "async.baseline": async_loop(),
            "sync.minimal_counting_handler": sync_loop(counting_sync),
            "async.minimal_counting_handler": async_loop(counting_async),
        },
        n,
        rounds,
    )
    from veronica_mw.adapters.langchain import VeronicaCallbackHandler

    loops: dict[str, Callable[[int], None]] = {}
    for mode, loop in (("sync", sync_loop), ("async", async_loop)):
        ctx = big_context()
        explicit: RunnableConfig = {"callbacks": [VeronicaCallbackHandler(ctx)]}
        loops[f"{mode}.hook_idle"] = loop()
        loops[f"{mode}.hook_active"] = loop(ctx=big_context())
        loops[f"{mode}.explicit_and_hook"] = loop(explicit, ctx)
    second = interleaved(loops, n, rounds)
    results: dict[str, dict[str, float]] = {"sync": {}, "async": {}}
    for name, value in {**first, **second}.items():
        mode, figure = name.split(".")
        results[mode][figure] = value
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer calls (smoke run)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--processes",
        type=int,
        default=1,
        help="run in N fresh processes, one after the other; report medians",
    )
    parser.add_argument("--raw", action="store_true", help=argparse.SUPPRESS)  # a child's output
    args = parser.parse_args()
    n, rounds = (200, 2) if args.quick else (2000, args.rounds)
    if args.processes > 1:
        runs = []
        for _ in range(args.processes):
            cmd = [sys.executable, __file__, "--raw", "--rounds", str(rounds)] + (
                ["--quick"] if args.quick else []
            )
            runs.append(json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout))
        results = {
            mode: {k: round(statistics.median(r[mode][k] for r in runs), 2) for k in runs[0][mode]}
            for mode in runs[0]
        }
    else:
        results = measure(n, rounds)
    if args.raw:
        print(json.dumps(results))
        return
    overhead = {
        mode: {k: round(v - figures["baseline"], 2) for k, v in figures.items() if k != "baseline"}
        for mode, figures in results.items()
    }
    active_async = overhead["async"]["hook_active"]
    report = {
        "benchmark": "langchain_adapter_overhead_per_model_call",
        "unit": "microseconds",
        "calls_per_sample": n,
        "rounds": rounds,
        "processes": args.processes,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "langchain_core": langchain_core.__version__,
        "results": results,
        "overhead_us": overhead,
        "ratios": {
            "async_hook_idle_overhead_us": overhead["async"]["hook_idle"],
            "async_in_context_vs_sync_handler": round(active_async / overhead["sync"]["hook_active"], 3),
            "async_in_context_vs_minimal_async_handler": round(
                active_async / overhead["async"]["minimal_counting_handler"], 3
            ),
        },
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
