"""A TCP proxy on 127.0.0.1 that delays every reply from the upstream (a slow Redis), running its own
event loop in a thread so that a blocked test loop cannot slow it down."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any


class DelayProxy:
    def __init__(self, upstream_port: int, delay_s: float) -> None:
        self.upstream_port = upstream_port
        self.delay_s = delay_s
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._server: asyncio.base_events.Server | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def __enter__(self) -> DelayProxy:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("delay proxy did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._client, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            self._server.close()
            tasks = asyncio.all_tasks(self._loop)
            for task in tasks:
                task.cancel()
            self._loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            self._loop.run_until_complete(self._server.wait_closed())
            self._loop.run_until_complete(asyncio.sleep(0.01))  # transports closed just now
            self._loop.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def forward(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            finally:
                dst.close()  # the client left: so does the upstream connection (collect ends)

        async def collect() -> None:
            while data := await up_reader.read(65536):
                queue.put_nowait((time.monotonic() + self.delay_s, data))
            queue.put_nowait((0.0, b""))

        async def deliver() -> None:
            while True:
                due, data = await queue.get()
                if not data:
                    return
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                writer.write(data)
                await writer.drain()

        tasks: list[Any] = [forward(reader, up_writer), collect(), deliver()]
        try:
            await asyncio.gather(*tasks)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            for w in (writer, up_writer):
                w.close()
            # Let the transports really close before the proxy's loop does (no unclosed sockets).
            await asyncio.gather(writer.wait_closed(), up_writer.wait_closed(), return_exceptions=True)
