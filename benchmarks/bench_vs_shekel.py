"""veronica-mw beside shekel on direct OpenAI SDK calls; prints JSON.

    python benchmarks/bench_vs_shekel.py [--quick] [--rounds 5] [--calls 300]

Needs ``openai`` and ``shekel==1.2.0`` (``pip install -r benchmarks/requirements.txt``). A fake
OpenAI server runs in its own process on 127.0.0.1 (asyncio, ``TCP_NODELAY``, keep-alive; a
canned completion, or the SSE chunks of a stream, with the usage chunk when it is asked for).
Three shapes of call: ``client.chat.completions.create`` sync, async (``AsyncOpenAI``) and a sync
stream (``stream=True``) read to its end. Three variants, each in a fresh process, interleaved in
every round:

- ``plain``: the SDK alone;
- ``shekel``: inside ``with shekel.budget(max_usd=...)`` (shekel patches the SDK while a budget
  is open, and checks the budget after each response);
- ``veronica``: after ``veronica_mw.instrument("openai")``, inside an ``ExecutionContext`` (every
  call is planned, its worst case reserved and its step admitted *before* the request is sent,
  then priced and committed).

``added_us`` is each variant's best µs per call minus ``plain``'s for the same shape and round,
median over rounds; ``veronica_vs_shekel_added`` their difference (<= 0: ours adds no more).
``cpu`` holds the same figures in CPU time of the calling process (``time.process_time``): what
each library adds is CPU work, and on a shared machine CPU time is not inflated by waiting for a
core, so those are the figures to compare there (the wall figures include the network).
``refused_before_send`` runs one call over a spent budget and counts the requests the server
received: 0 for a check before the request, 1 for a check after it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from typing import Any

MODEL = "gpt-4o-mini"
MESSAGES: list[dict[str, str]] = [{"role": "user", "content": "benchmark"}]
SHAPES = ("sync", "async", "stream")
VARIANTS = ("plain", "shekel", "veronica")
_USAGE = {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}

# -- the fake server ------------------------------------------------------------------------------


def _completion() -> bytes:
    message = {"role": "assistant", "content": "ok"}
    body = {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 0,
        "model": MODEL,
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": _USAGE,
    }
    return json.dumps(body).encode()


def _stream(usage: bool) -> bytes:
    def chunk(delta: dict[str, Any], finish: str | None, with_usage: Any = None) -> bytes:
        body: dict[str, Any] = {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": MODEL,
            "choices": [] if with_usage else [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        if with_usage:
            body["usage"] = with_usage
        return b"data: " + json.dumps(body).encode() + b"\n\n"

    parts = [chunk({"role": "assistant", "content": ""}, None), chunk({"content": "o"}, None)]
    parts += [chunk({"content": "k"}, None), chunk({}, "stop")]
    if usage:
        parts.append(chunk({}, None, _USAGE))
    return b"".join(parts) + b"data: [DONE]\n\n"


def _response(status: str, content_type: str, body: bytes) -> bytes:
    head = f"HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {len(body)}\r\n\r\n"
    return head.encode() + body


async def _serve(port_file: str) -> None:
    completion = _response("200 OK", "application/json", _completion())
    streams = {flag: _response("200 OK", "text/event-stream", _stream(flag)) for flag in (False, True)}
    received = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal received
        writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                body = json.loads(await reader.readexactly(length)) if length else {}
                if head.startswith(b"GET /count"):
                    writer.write(_response("200 OK", "application/json", str(received).encode()))
                elif body.get("stream"):
                    received += 1
                    writer.write(streams[bool((body.get("stream_options") or {}).get("include_usage"))])
                else:
                    received += 1
                    writer.write(completion)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    with open(port_file + ".tmp", "w") as f:
        f.write(str(port))
    os.replace(port_file + ".tmp", port_file)
    async with server:
        await server.serve_forever()


# -- one variant, in its own process ----------------------------------------------------------------


def _setup(variant: str) -> Any:
    """The scope each batch of calls runs in, for ``variant`` (a context manager factory)."""
    import contextlib

    if variant == "plain":
        return contextlib.nullcontext
    if variant == "shekel":
        import shekel

        return lambda: shekel.budget(max_usd=1e6)
    import veronica_mw

    veronica_mw.instrument("openai")
    limits = veronica_mw.ExecutionConfig(max_cost_usd=1e6, max_steps=10**9, max_retries_total=0)
    return lambda: veronica_mw.ExecutionContext(limits)


def _worker(variant: str, url: str, calls: int, repeats: int) -> dict[str, float]:
    import openai

    scope = _setup(variant)
    client = openai.OpenAI(base_url=url, api_key="bench", max_retries=0)
    aclient = openai.AsyncOpenAI(base_url=url, api_key="bench", max_retries=0)

    def sync_call() -> None:
        client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=16)  # type: ignore[arg-type]

    def stream_call() -> None:
        stream = client.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,  # type: ignore[arg-type]
            max_tokens=16,
            stream=True,
        )
        for _ in stream:
            pass

    def timed(fn: Any) -> tuple[float, float]:
        with scope():
            start, cpu = time.perf_counter(), time.process_time()
            for _ in range(calls):
                fn()
            return (time.perf_counter() - start) / calls, (time.process_time() - cpu) / calls

    async def async_batch() -> tuple[float, float]:
        with scope():
            start, cpu = time.perf_counter(), time.process_time()
            for _ in range(calls):
                await aclient.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=16)  # type: ignore[arg-type]
            return (time.perf_counter() - start) / calls, (time.process_time() - cpu) / calls

    loop = asyncio.new_event_loop()
    run = {"sync": lambda: timed(sync_call), "async": lambda: loop.run_until_complete(async_batch())}
    run["stream"] = lambda: timed(stream_call)
    for shape in SHAPES:  # warm up: connections, pricing caches, first-use imports
        run[shape]()
    best = {shape: float("inf") for shape in SHAPES}
    best_cpu = dict(best)
    for _ in range(repeats):
        for shape in SHAPES:
            wall, cpu = run[shape]()
            best[shape], best_cpu[shape] = min(best[shape], wall), min(best_cpu[shape], cpu)
    loop.run_until_complete(aclient.close())
    loop.close()
    client.close()
    figures = {shape: round(v * 1e6, 2) for shape, v in best.items()}
    return {**figures, **{f"{shape}_cpu": round(v * 1e6, 2) for shape, v in best_cpu.items()}}


def _refused(variant: str, url: str) -> int:
    """Requests the server received for one call made with its budget already spent."""
    import httpx
    import openai

    count = lambda: int(httpx.get(url.removesuffix("/v1") + "/count").text)  # noqa: E731
    client = openai.OpenAI(base_url=url, api_key="bench", max_retries=0)
    before = count()
    try:
        if variant == "shekel":
            import shekel

            with shekel.budget(max_usd=1e-12):
                client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=16)  # type: ignore[arg-type]
        else:
            import veronica_mw

            veronica_mw.instrument("openai")
            limits = veronica_mw.ExecutionConfig(max_cost_usd=1e-12, max_steps=10, max_retries_total=0)
            with veronica_mw.ExecutionContext(limits):
                client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=16)  # type: ignore[arg-type]
    except Exception as exc:  # the budget error each library raises
        if "budget" not in type(exc).__name__.lower() and "halted" not in type(exc).__name__.lower():
            raise
    else:
        raise RuntimeError(f"{variant}: a call over a spent budget was not refused")
    finally:
        client.close()
    return count() - before


# -- the driver -----------------------------------------------------------------------------------------


def _spawn(*args: str) -> Any:
    done = subprocess.run(
        [sys.executable, os.path.abspath(__file__), *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        sys.exit(f"bench_vs_shekel {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one short round (smoke run)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=300, help="calls per timed batch")
    parser.add_argument("--repeats", type=int, default=3, help="timed batches per shape per process")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--refused", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.serve:
        asyncio.run(_serve(opts.serve))
        return
    if opts.variant:
        if opts.refused:
            print(json.dumps(_refused(opts.variant, opts.url)))
        else:
            print(json.dumps(_worker(opts.variant, opts.url, opts.calls, opts.repeats)))
        return
    rounds, calls, repeats = (1, 30, 1) if opts.quick else (opts.rounds, opts.calls, opts.repeats)
    port_file = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"bench_vs_shekel.{os.getpid()}.port")
    server = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve", port_file])
    try:
        deadline = time.monotonic() + 30
        while not os.path.exists(port_file):
            if time.monotonic() > deadline or server.poll() is not None:
                sys.exit("fake OpenAI server did not start")
            time.sleep(0.02)
        with open(port_file) as f:
            url = f"http://127.0.0.1:{f.read()}/v1"
        per_round: list[dict[str, dict[str, float]]] = []
        for _ in range(rounds):  # interleaved: a burst of load hits every variant alike
            per_round.append(
                {v: _spawn("--variant", v, "--url", url, "--calls", str(calls), "--repeats", str(repeats))
                 for v in VARIANTS}
            )
        refused = {v: _spawn("--variant", v, "--url", url, "--refused") for v in ("shekel", "veronica")}
    finally:
        server.terminate()
        server.wait(10)
        if os.path.exists(port_file):
            os.remove(port_file)
    from importlib.metadata import version

    import openai

    def median(variant: str, shape: str, minus: str | None = None) -> float:
        return round(
            statistics.median(r[variant][shape] - (r[minus][shape] if minus else 0.0) for r in per_round), 2
        )

    added = {v: {s: median(v, s, "plain") for s in SHAPES} for v in ("shekel", "veronica")}
    cpu = [f"{s}_cpu" for s in SHAPES]
    added_cpu = {v: {s[:-4]: median(v, s, "plain") for s in cpu} for v in ("shekel", "veronica")}
    result = {
        "benchmark": "vs_shekel",
        "python": platform.python_version(),
        "openai": openai.__version__,
        "shekel": version("shekel"),
        "rounds": rounds,
        "calls_per_batch": calls,
        "per_call_us": {v: {s: median(v, s) for s in SHAPES} for v in VARIANTS},
        "added_us": added,
        "veronica_vs_shekel_added": {s: round(added["veronica"][s] - added["shekel"][s], 2) for s in SHAPES},
        "cpu": {
            "per_call_us": {v: {s[:-4]: median(v, s) for s in cpu} for v in VARIANTS},
            "added_us": added_cpu,
            "veronica_vs_shekel_added": {
                s: round(added_cpu["veronica"][s] - added_cpu["shekel"][s], 2) for s in SHAPES
            },
        },
        "refused_before_send": {v: {"requests_sent_over_budget": n} for v, n in refused.items()},
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
