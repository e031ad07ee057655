"""rediss:// for real: a TLS-only redis-server with a CA made here by openssl; the pool through a
rediss:// URL (sync and asyncio paths) and through an asyncio TLS client given alone, whose sync
twin must carry the TLS settings over."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis.asyncio

from veronica_mw import ExecutionConfig, ExecutionContext, WrapOptions
from veronica_mw.pools.budget_pool import BudgetPool
from veronica_mw.pools.redis_backend import RedisBudgetBackend

from .conftest import REDIS_BIN, Closer, free_port

pytestmark = pytest.mark.redis
OPENSSL = shutil.which("openssl")
CALL = WrapOptions(cost_estimate_hint=0.03, cost_fn=lambda r: 0.03)
CONFIG = ExecutionConfig(max_cost_usd=1.0, max_steps=20, max_retries_total=0)


def _openssl(*args: str, cwd: Path) -> None:
    assert OPENSSL is not None
    subprocess.run([OPENSSL, *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def tls_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    if REDIS_BIN is None or OPENSSL is None:
        if os.environ.get("CI") == "true":
            pytest.fail("redis-server and openssl are needed (CI=true: the TLS test must run)")
        pytest.skip("redis-server or openssl is not installed")
    d = tmp_path_factory.mktemp("tls")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
             "-days", "1", "-subj", "/CN=veronica-test-ca", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)  # fmt: skip
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
             "-subj", "/CN=127.0.0.1", cwd=d)  # fmt: skip
    # Python 3.13 verifies strictly (VERIFY_X509_STRICT): the CA needs its key usage, the server
    # certificate its authority key identifier.
    (d / "san.ext").write_text(
        "subjectAltName=IP:127.0.0.1\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\nauthorityKeyIdentifier=keyid,issuer\nsubjectKeyIdentifier=hash\n"
    )
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "server.crt", "-days", "1", "-extfile", "san.ext", cwd=d)  # fmt: skip
    port = free_port()
    proc = subprocess.Popen(
        [REDIS_BIN, "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1",
         "--tls-cert-file", str(d / "server.crt"), "--tls-key-file", str(d / "server.key"),
         "--tls-ca-cert-file", str(d / "ca.crt"), "--tls-auth-clients", "no",
         "--save", "", "--appendonly", "no", "--dir", str(d)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                client = redis.Redis(host="127.0.0.1", port=port, ssl=True, ssl_ca_certs=str(d / "ca.crt"))
                client.ping()
                client.close()
                break
            except redis.RedisError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.05)
        yield port, d / "ca.crt"
    finally:
        proc.kill()
        proc.wait(10)


def _spend(pool: BudgetPool, tenant: str) -> int:
    ran = 0
    while pool.admit(tenant).allowed and ran < 20:
        ExecutionContext(CONFIG, budget_parent=pool.ledger(tenant)).call_llm(lambda: "ok", options=CALL)
        ran += 1
    return ran


@pytest.mark.anyio
async def test_rediss_url_sync_and_asyncio(tls_redis: tuple[int, Path], closer: Closer) -> None:
    port, ca = tls_redis
    url = f"rediss://127.0.0.1:{port}/0?ssl_cert_reqs=required&ssl_ca_certs={ca}"
    backend = RedisBudgetBackend(url)
    pool = BudgetPool(0.30, window_s=3600, key_func=str, backend=backend)
    assert _spend(pool, "sync-tenant") == 10
    admission = await pool.aadmit("async-tenant")
    assert admission.allowed and admission.ledger is not None
    assert await admission.ledger.areserve(0.03)
    await admission.ledger.asettle(0.03, 0.03)
    await backend.aclose()
    assert pool.usage("async-tenant").spent_usd == pytest.approx(0.03)
    backend.close()
    # The same port without TLS is no Redis at all: refused (503), never served unbounded.
    plain = closer(RedisBudgetBackend(f"redis://127.0.0.1:{port}/0", socket_timeout=0.5))
    assert BudgetPool(0.30, window_s=3600, key_func=str, backend=plain).admit("x").status == 503


@pytest.mark.anyio
async def test_asyncio_tls_client_alone_gets_a_tls_sync_twin(tls_redis: tuple[int, Path]) -> None:
    port, ca = tls_redis
    aclient = redis.asyncio.Redis(host="127.0.0.1", port=port, ssl=True, ssl_ca_certs=str(ca))
    backend = RedisBudgetBackend(aclient)
    pool = BudgetPool(0.30, window_s=3600, key_func=str, backend=backend, name="twin")
    assert _spend(pool, "t") == 10  # the sync path: a derived client, over TLS
    assert (await pool.aadmit("t")).status == 429  # the asyncio path: the client given
    backend.close()
    await aclient.aclose()
