"""A real Redis Cluster for tests: 6 ``redis-server`` nodes (3 masters + 3 replicas) on 127.0.0.1.

Use the ``redis_cluster`` fixture (session-scoped: the cluster starts once, ~3 s) by importing it
into a conftest (``from ..support.redis_cluster import redis_cluster  # noqa: F401``). Tests keep
apart by key namespace, not by flushing. A test that kills a master calls :meth:`kill` and
:meth:`wait_promoted`, and :meth:`heal` (or the fixture, before the next test) brings the dead node
back as a replica, so every test starts from a healthy cluster.

``cluster-node-timeout`` is 1000 ms so a failover takes ~2-3 s, and
``cluster-require-full-coverage no`` so the masters that are up keep serving while one is down
(the setting the scaling-out guide recommends for budgets). Without ``redis-server``/``redis-cli``
the fixture skips locally and FAILS under CI=true.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REDIS_SERVER = shutil.which("redis-server")
REDIS_CLI = shutil.which("redis-cli")
NODE_TIMEOUT_MS = 1000
HANG_GUARD_S = 30.0


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def cluster_port(taken: set[int]) -> int:
    """A free port whose cluster-bus twin (port + 10000) is free too."""
    rng = random.SystemRandom()
    for _ in range(1000):
        port = rng.randint(20000, 55000)
        if port not in taken and port + 10000 not in taken and _bindable(port) and _bindable(port + 10000):
            return port
    raise RuntimeError("no free port pair for a cluster node")


@dataclass
class ClusterNode:
    """One redis-server of the cluster (its data dir holds nodes.conf, so it can be restarted)."""

    port: int
    directory: Path
    proc: subprocess.Popen[bytes] | None = None
    extra: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        assert REDIS_SERVER is not None
        self.directory.mkdir(parents=True, exist_ok=True)
        args = [
            REDIS_SERVER,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--protected-mode", "no",
            "--cluster-enabled", "yes",
            "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
            "--cluster-require-full-coverage", "no",
            "--cluster-replica-validity-factor", "0",
            "--save", "",
            "--appendonly", "no",
            "--repl-diskless-sync-delay", "0",  # a replica (re)joining syncs at once, not after 5 s
            "--dir", str(self.directory),
            "--loglevel", "warning",
            "--logfile", str(self.directory / "redis.log"),
            "--daemonize", "no",
            *self.extra,
        ]  # fmt: skip
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + HANG_GUARD_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server on port {self.port} exited with {self.proc.returncode}")
            try:
                if self.client().ping():
                    return
            except OSError:
                pass
            except Exception as exc:  # redis.ConnectionError while it binds
                if "Connection" not in type(exc).__name__:
                    raise
            time.sleep(0.02)
        raise RuntimeError(f"redis-server on port {self.port} did not start")

    def client(self) -> Any:
        """A plain (non-cluster) redis-py client to this node alone; the caller closes it."""
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=2.0, decode_responses=True)

    def call(self, *args: Any) -> Any:
        client = self.client()
        try:
            return client.execute_command(*args)
        finally:
            client.close()

    def kill(self) -> None:
        """SIGKILL: no shutdown, no goodbye to the other nodes (like a crashed machine)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=HANG_GUARD_S)

    def stop(self) -> None:
        self.kill()
        self.proc = None


class LocalRedisCluster:
    """Six nodes, three masters with one replica each, made by ``redis-cli --cluster create``."""

    def __init__(self, directory: Path, *, nodes: int = 6) -> None:
        taken: set[int] = set()
        self.nodes: list[ClusterNode] = []
        for index in range(nodes):
            port = cluster_port(taken)
            taken |= {port, port + 10000}
            self.nodes.append(ClusterNode(port, directory / f"node{index}"))

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> None:
        assert REDIS_CLI is not None
        try:
            for node in self.nodes:
                node.start()
            create = [REDIS_CLI, "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in self.nodes)]
            done = subprocess.run(
                [*create, "--cluster-replicas", "1", "--cluster-yes"],
                capture_output=True,
                text=True,
                timeout=HANG_GUARD_S * 2,
            )
            if done.returncode != 0:
                raise RuntimeError(f"redis-cli --cluster create failed: {done.stdout[-1500:]}{done.stderr}")
            self.wait_ok()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    # -- topology ----------------------------------------------------------------------------------

    @property
    def live(self) -> list[ClusterNode]:
        return [n for n in self.nodes if n.alive]

    @property
    def url(self) -> str:
        """A plain URL to one live node (a master): what a user would paste into the config."""
        return self.masters()[0].url

    @property
    def urls(self) -> list[str]:
        return [n.url for n in self.live]

    def _table(self) -> list[dict[str, Any]]:
        """CLUSTER NODES as seen by a live node: id, port, flags, master id, slot ranges."""
        rows = []
        text = self.live[0].call("CLUSTER", "NODES")
        for line in str(text).splitlines():
            parts = line.split()
            addr = parts[1].split("@")[0]
            rows.append(
                {
                    "id": parts[0],
                    "port": int(addr.rsplit(":", 1)[1]) if ":" in addr and addr.rsplit(":", 1)[1] else 0,
                    "flags": set(parts[2].split(",")),
                    "master": parts[3],
                    "slots": parts[8:],
                }
            )
        return rows

    def node(self, port: int) -> ClusterNode:
        return next(n for n in self.nodes if n.port == port)

    def masters(self) -> list[ClusterNode]:
        """Live masters that serve slots, as the cluster sees them now."""
        ports = [
            r["port"]
            for r in self._table()
            if "master" in r["flags"] and r["slots"] and "fail" not in r["flags"]
        ]
        return [n for n in self.live if n.port in ports]

    def replicas_of(self, master: ClusterNode) -> list[ClusterNode]:
        table = self._table()
        ids = {r["port"]: r["id"] for r in table}
        ports = [r["port"] for r in table if r["master"] == ids.get(master.port)]
        return [n for n in self.nodes if n.port in ports]

    def slot(self, key: str) -> int:
        return int(self.live[0].call("CLUSTER", "KEYSLOT", key))

    def master_of(self, key: str) -> ClusterNode:
        """The live master serving ``key``'s slot."""
        slot = self.slot(key)
        for row in self._table():
            if "master" not in row["flags"] or "fail" in row["flags"]:
                continue
            for span in row["slots"]:
                if span.startswith("["):  # a slot being migrated
                    continue
                low, _, high = span.partition("-")
                if int(low) <= slot <= int(high or low):
                    return self.node(row["port"])
        raise LookupError(f"no live master serves slot {slot}")

    # -- failures ----------------------------------------------------------------------------------

    def kill(self, node: ClusterNode) -> None:
        """SIGKILL one node (its data dir stays, so :meth:`revive` restarts it)."""
        node.kill()

    def wait_promoted(self, dead: ClusterNode, timeout: float = 20.0) -> ClusterNode:
        """Wait until a replica of the killed master ``dead`` is a master serving slots and every
        live node says cluster_state:ok; returns the new master."""
        replicas = {n.port for n in self.replicas_of(dead)} if self._knows(dead) else set()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                table = self._table()
                promoted = [
                    r["port"]
                    for r in table
                    if r["port"] in replicas and "master" in r["flags"] and r["slots"]
                ]
                if promoted and self._all_ok():
                    return self.node(promoted[0])
            except OSError:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"no replica of {dead.port} was promoted within {timeout} s")

    def _knows(self, node: ClusterNode) -> bool:
        return any(r["port"] == node.port for r in self._table())

    def revive(self, node: ClusterNode) -> None:
        """Restart a killed node from its nodes.conf: it rejoins (as a replica once replaced)."""
        node.stop()
        node.start()

    def heal(self, timeout: float = 30.0) -> None:
        """Restart every dead node and wait until each node has its role and the cluster is ok."""
        for node in self.nodes:
            if not node.alive:
                self.revive(node)
        self.wait_ok(timeout)

    def _all_ok(self) -> bool:
        for node in self.live:
            try:
                info = str(node.call("CLUSTER", "INFO"))
            except Exception:
                return False
            if "cluster_state:ok" not in info:
                return False
        return True

    def wait_ok(self, timeout: float = 30.0) -> None:
        """Wait until every live node says cluster_state:ok, sees every node connected and has
        three masters with one connected replica each."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self._healthy():
                    return
            except Exception:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"cluster not ok within {timeout} s")

    def _healthy(self) -> bool:
        if not self._all_ok():
            return False
        for node in self.live:
            table = str(node.call("CLUSTER", "NODES")).splitlines()
            if len(table) != len(self.nodes) or any("fail" in line.split()[2] for line in table):
                return False
            if any(line.split()[7] != "connected" for line in table):
                return False
        masters = [r for r in self._table() if "master" in r["flags"] and r["slots"]]
        replicas = [r for r in self._table() if "slave" in r["flags"]]
        if len(masters) != len(self.nodes) // 2 or len(replicas) != len(self.nodes) - len(masters):
            return False
        for replica in self.nodes:
            if replica.port in {r["port"] for r in replicas}:
                info = replica.call("INFO", "replication")  # parsed into a dict by redis-py
                if info.get("master_link_status") != "up":
                    return False
        return True

    # -- settings ----------------------------------------------------------------------------------

    def config_set(self, name: str, value: str) -> None:
        """CONFIG SET on every live node (e.g. ``maxmemory``); undo it yourself at the end."""
        for node in self.live:
            node.call("CONFIG", "SET", name, value)


def require_cluster_binaries() -> None:
    missing = [
        name for name, path in (("redis-server", REDIS_SERVER), ("redis-cli", REDIS_CLI)) if path is None
    ]
    if missing:
        message = f"{' and '.join(missing)} not installed (Debian: apt-get install redis-server)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{message}; CI=true: the Redis Cluster tests must run")
        pytest.skip(message)


@pytest.fixture(scope="session")
def _redis_cluster_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRedisCluster]:
    require_cluster_binaries()
    cluster = LocalRedisCluster(tmp_path_factory.mktemp("redis-cluster"))
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def redis_cluster(_redis_cluster_session: LocalRedisCluster) -> Iterator[LocalRedisCluster]:
    """The session's cluster, healthy at the start of each test (nodes killed by an earlier test
    are back as replicas)."""
    cluster = _redis_cluster_session
    if len(cluster.live) != len(cluster.nodes):
        cluster.heal()
    yield cluster
