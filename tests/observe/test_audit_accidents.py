"""Accidents are not tampering: after SIGKILL mid-write, a full disk (ENOSPC), a restarted process
reusing a pid in the same directory, or rotation, ``audit verify`` exits 0 -- explaining each end it
found with a ``recovered:`` line -- with the HMAC key, the public key and the anchor alike."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

import pytest

from veronica_mw import AuditLog, ExecutionContext, WrapOptions
from veronica_mw.observe._audit_files import ChainFiles, open_exclusive
from veronica_mw.observe._audit_sign import keygen

from ._signed_logs import CONFIG, KEY, write_chain
from .conftest import Cli

CHILD = Path(__file__).with_name("_audit_child.py")


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, Any]:
    private, public = keygen(tmp_path / "signing")
    key_file = tmp_path / "hmac"
    key_file.write_bytes(KEY)
    anchor = tmp_path / "witness" / "anchors.jsonl"
    logs = tmp_path / "logs"
    logs.mkdir(mode=0o700)
    return {
        "logs": logs, "private": private, "anchor": anchor,
        "hmac": ("--key-file", key_file),
        "anchored": ("--key-file", key_file, "--public-key", public, "--anchor", anchor),
    }  # fmt: skip


def verify(cli: Cli, keys: dict[str, Any], mode: str) -> tuple[int, str]:
    code, out, err = cli("audit", "verify", keys["logs"], *keys[mode])
    return code, out + err


def child(keys: dict[str, Any], mode: str, prefix: tuple[str, ...] = ()) -> subprocess.Popen[str]:
    args = [
        *prefix,
        sys.executable,
        str(CHILD),
        str(keys["logs"]),
        str(keys["private"]),
        str(keys["anchor"]),
        mode,
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def run_child(keys: dict[str, Any], prefix: tuple[str, ...] = (), mode: str = "unclosed") -> None:
    """A process that writes five calls and exits without closing its log (or closing it)."""
    with child(keys, mode, prefix) as proc:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err


def test_sigkill_mid_write(cli: Cli, keys: dict[str, Any]) -> None:
    with child(keys, "loop") as proc:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        (written,) = keys["logs"].glob("audit.*.jsonl")
        while written.stat().st_size < 200_000:  # well into writing
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        assert proc.wait() == -signal.SIGKILL
    code, out = verify(cli, keys, "hmac")
    assert code == 1 and "truncated" in out  # nobody has explained that end yet
    # The next process in the directory states what it found; now the end is explained.
    write_chain(keys["logs"], keys["private"], keys["anchor"], calls=2)
    for mode in ("hmac", "anchored"):
        code, out = verify(cli, keys, mode)
        assert code == 0 and f"recovered: {written}: its process ended without closing it" in out, out


class FullDisk:
    """Files whose next ``fail`` writes raise ENOSPC, after writing half (``partial``) or nothing."""

    def __init__(self) -> None:
        self.fail = 0
        self.partial = True
        self.failures = 0

    def open(self, path: Path) -> IO[bytes]:
        return _Faulty(open_exclusive(path), self)  # type: ignore[return-value]


class _Faulty:
    def __init__(self, file: IO[bytes], disk: FullDisk) -> None:
        self._file, self._disk = file, disk

    def write(self, data: bytes) -> int:
        disk = self._disk
        if disk.fail:
            disk.fail -= 1
            disk.failures += 1
            if disk.partial:
                self._file.write(bytes(data[: len(data) // 2]))
                self._file.flush()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return self._file.write(data)

    def flush(self) -> None:
        self._file.flush()

    def fileno(self) -> int:
        return self._file.fileno()

    def close(self) -> None:
        self._file.close()


def test_enospc_then_space_again(cli: Cli, keys: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    # No small tmpfs here: the full disk is simulated at the writer's one I/O seam (ChainFiles.open_file),
    # a real file whose write raises OSError(ENOSPC) after writing half of what it was given.
    disk = FullDisk()
    monkeypatch.setattr(ChainFiles, "open_file", staticmethod(disk.open))
    log = AuditLog(
        keys["logs"] / "audit.jsonl",
        key=KEY,
        signing_key=keys["private"],
        anchor=keys["anchor"],
        retry_s=0.05,
    )

    def calls(n: int) -> None:
        with ExecutionContext(CONFIG, audit=log) as ctx:
            for _ in range(n):
                ctx.call_llm(lambda: "ok", options=WrapOptions(operation_name="chat", model="gpt-4o-mini"))
        assert log.flush()

    calls(3)
    disk.fail = 1  # the disk fills up mid-write
    calls(3)
    disk.fail, disk.partial = 2, False  # two retries fail before a byte is written
    for _ in range(3):
        time.sleep(0.08)
        calls(1)
    time.sleep(0.08)
    calls(3)  # space again
    assert log.close() and disk.failures == 3 and log.dropped > 0
    assert all(p.stat().st_size > 0 for p in keys["logs"].iterdir())  # no empty chain files left behind
    for mode in ("hmac", "anchored"):
        code, out = verify(cli, keys, mode)
        assert code == 0 and "recovered: " in out and "a write error" in out, out


def _pid_namespaces() -> bool:
    try:
        probe = subprocess.run(["unshare", "--pid", "--fork", "true"], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


def test_pid_reuse_in_the_same_directory(cli: Cli, keys: dict[str, Any]) -> None:
    if _pid_namespaces():
        # Two "container starts" in a row: each process is pid 1 in its own pid namespace.
        run_child(keys, ("unshare", "--pid", "--fork"))
        run_child(keys, ("unshare", "--pid", "--fork"), mode="close")
        modes: tuple[str, ...] = ("hmac", "anchored")
    else:  # no pid namespaces (unprivileged): give the dead process's file our pid by renaming it
        run_child(keys)
        (old,) = keys["logs"].glob("audit.*.jsonl")
        host = old.name.split(".")[1]
        old.rename(keys["logs"] / f"audit.{host}.{os.getpid()}.jsonl")
        write_chain(keys["logs"], keys["private"], keys["anchor"], calls=2)
        modes = ("hmac",)  # the rename itself is what a signed digest would (rightly) report
    names = sorted(p.name for p in keys["logs"].glob("audit.*.jsonl"))
    assert len(names) == 2 and names[0].split(".")[2] == names[1].split(".")[2]  # the same pid
    for mode in modes:
        code, out = verify(cli, keys, mode)
        assert code == 0 and "recovered: " in out, out
        assert "missing" not in out


def test_rotation_is_not_an_accident(cli: Cli, keys: dict[str, Any]) -> None:
    log = write_chain(keys["logs"], keys["private"], keys["anchor"], calls=40, max_bytes=4096)
    assert len(log.files) >= 4
    for mode in ("hmac", "anchored"):
        code, out = verify(cli, keys, mode)
        assert code == 0 and "recovered:" not in out and "not covered:" not in out, out
