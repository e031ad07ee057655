"""Signed digests and anchors: every tampering kind is reported (even by someone holding the HMAC
key), with the anchor where only an anchor can tell; a rotated, signed log verifies clean."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from veronica_mw.observe._audit_sign import keygen

from ..support.redis_cluster import LocalRedisCluster
from ._signed_logs import KEY, rechain, write_chain
from .conftest import Cli


@pytest.fixture
def setup(tmp_path: Path) -> dict[str, Any]:
    private, public = keygen(tmp_path / "signing")
    key_file = tmp_path / "hmac"
    key_file.write_bytes(KEY)
    anchor = tmp_path / "witness" / "anchors.jsonl"
    logs = tmp_path / "logs"
    logs.mkdir(mode=0o700)
    first = write_chain(logs, private, anchor)
    second = write_chain(logs, private, anchor, calls=8)
    return {
        "logs": logs,
        "chains": [[Path(f) for f in first.files], [Path(f) for f in second.files]],
        "ids": [first._writer.chain.log_id, second._writer.chain.log_id],  # type: ignore[union-attr]
        "hmac": ("--key-file", key_file),
        "signed": ("--key-file", key_file, "--public-key", public),
        "anchored": ("--key-file", key_file, "--public-key", public, "--anchor", anchor),
        "heads": [first.head, second.head],
    }


def run(cli: Cli, s: dict[str, Any], mode: str, *extra: str) -> tuple[int, str]:
    code, out, err = cli("audit", "verify", s["logs"], *s[mode], *extra)
    return code, out + err


def test_a_rotated_signed_log_of_two_chains_verifies(cli: Cli, setup: dict[str, Any]) -> None:
    assert len(setup["chains"][0]) >= 3  # really rotated
    code, out = run(cli, setup, "anchored")
    assert code == 0, out
    assert "intact up to" in out and "for 2 chains" in out and "(0 records)" in out
    assert "recovered:" not in out and "not covered:" not in out
    for head in setup["heads"]:  # each chain's own head
        assert run(cli, setup, "anchored", "--expect-head", head)[0] == 0


def test_truncating_to_an_earlier_head(cli: Cli, setup: dict[str, Any]) -> None:
    # Everything after an earlier count head goes: that file's tail and every later file.
    files = setup["chains"][0]
    for n in range(len(files) - 1, -1, -1):
        lines = files[n].read_bytes().splitlines(keepends=True)
        heads = [i for i, line in enumerate(lines[:-3]) if b'"reason":"count"' in line]
        if heads:
            files[n].write_bytes(b"".join(lines[: heads[-1] + 1]))
            for later in files[n + 1 :]:
                later.unlink()
            break
    else:
        raise AssertionError("no earlier head to cut back to")
    code, out = run(cli, setup, "anchored")
    assert code == 1 and "missing digest" in out and setup["ids"][0] in out, out
    # Without an anchor only the head kept earlier catches it (what the threat model says).
    assert run(cli, setup, "signed")[0] == 0
    code, out = run(cli, setup, "hmac", "--expect-head", setup["heads"][0])
    assert code == 1 and "truncated" in out, out


def test_truncating_mid_file(cli: Cli, setup: dict[str, Any]) -> None:
    first = setup["chains"][0][0]  # an earlier file of the chain: later digests cover it whole
    data = first.read_bytes()
    first.write_bytes(data[: len(data) // 2])
    code, out = run(cli, setup, "signed")
    assert code == 1 and "truncated" in out, out


def test_deleting_a_chain(cli: Cli, setup: dict[str, Any]) -> None:
    for path in setup["chains"][1]:
        path.unlink()
    code, out = run(cli, setup, "anchored")
    assert code == 1 and "missing chain" in out and setup["ids"][1] in out, out
    assert run(cli, setup, "signed")[0] == 0  # nothing on the host says it existed


def test_deleting_the_last_digest(cli: Cli, setup: dict[str, Any]) -> None:
    last = setup["chains"][1][-1]
    lines = last.read_bytes().splitlines(keepends=True)
    assert b'"type":"digest"' in lines[-1]
    last.write_bytes(b"".join(lines[:-1]))
    code, out = run(cli, setup, "anchored")
    assert code == 1 and "missing digest" in out, out


def test_swapping_two_chains_files(cli: Cli, setup: dict[str, Any]) -> None:
    a, b = setup["chains"][0][0], setup["chains"][1][0]
    data_a, data_b = a.read_bytes(), b.read_bytes()
    a.write_bytes(data_b)
    b.write_bytes(data_a)
    code, out = run(cli, setup, "signed")
    assert code == 1 and "missing file" in out, out


def _edit(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    call = next(r for r in records if r["type"] == "call")
    call["cost_usd"] = 0.5
    return records


def _reorder(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    i = next(n for n, r in enumerate(records) if r["type"] == "call_admitted")
    records[i], records[i + 1] = records[i + 1], records[i]
    return records


def _insert(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    i = next(n for n, r in enumerate(records) if r["type"] == "call")
    return [*records[: i + 1], dict(records[i]), *records[i + 1 :]]


def _delete(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    i = next(n for n, r in enumerate(records) if r["type"] == "call")
    return records[:i] + records[i + 1 :]


def _drop_digests(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r["type"] != "digest"]


def _forge_statement(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for record in records:
        if record["type"] == "digest":
            record["statement"]["last_seq"] += 1
    return records


@pytest.mark.parametrize(
    "mutate", [_edit, _reorder, _insert, _delete, _drop_digests, _forge_statement],
    ids=["edit", "reorder", "insert", "delete", "drop-digests", "forge-statement"],
)  # fmt: skip
def test_rewriting_a_chain_with_the_hmac_key_but_not_the_signing_key(
    cli: Cli, setup: dict[str, Any], mutate: Any
) -> None:
    rechain(setup["chains"][0], mutate)
    assert run(cli, setup, "hmac")[0] == 0  # the HMAC key holder fooled the HMAC chain...
    code, out = run(cli, setup, "signed")
    assert code == 1, out  # ...not the signatures


@pytest.mark.parametrize("kind", ["edit", "reorder", "insert"])
def test_editing_reordering_inserting_one_line(cli: Cli, setup: dict[str, Any], kind: str) -> None:
    path = setup["chains"][0][0]
    lines = path.read_bytes().splitlines(keepends=True)
    if kind == "edit":
        lines[3] = lines[3].replace(b'"seq":', b'"seq": ', 1)
    elif kind == "reorder":
        lines[3], lines[4] = lines[4], lines[3]
    else:
        lines.insert(3, lines[5])
    path.write_bytes(b"".join(lines))
    for mode in ("hmac", "signed", "anchored"):
        code, out = run(cli, setup, mode)
        assert code == 1, (mode, out)


def test_anchor_to_redis(tmp_path: Path, cli: Cli, redis_url: str) -> None:
    private, public = keygen(tmp_path / "signing")
    key_file = tmp_path / "hmac"
    key_file.write_bytes(KEY)
    url = f"{redis_url}?key=audit-test-{tmp_path.name}"
    (tmp_path / "logs").mkdir()
    write_chain(tmp_path / "logs", private, url)
    proof = ("--key-file", key_file, "--public-key", public, "--anchor", url)
    code, out, err = cli("audit", "verify", tmp_path / "logs", *proof)
    assert code == 0 and "anchored: " in out, out + err
    shutil.rmtree(tmp_path / "logs")
    (tmp_path / "logs").mkdir()
    write_chain(tmp_path / "logs", private, tmp_path / "elsewhere.jsonl", calls=1)  # another chain
    code, out, err = cli("audit", "verify", tmp_path / "logs", *proof)
    assert code == 1 and "missing chain" in out, out + err


def test_anchor_to_a_redis_cluster_through_any_node(
    tmp_path: Path, cli: Cli, redis_cluster: LocalRedisCluster
) -> None:
    """A plain URL to one node of a real cluster is a working anchor, whichever master owns the list."""
    private, public = keygen(tmp_path / "signing")
    key_file = tmp_path / "hmac"
    key_file.write_bytes(KEY)
    # A list key owned by a master other than the node in the URL: a standalone client gets MOVED.
    node = redis_cluster.masters()[0]
    name = next(
        f"audit-{tmp_path.name}-{i}"
        for i in range(10_000)
        if redis_cluster.master_of(f"audit-{tmp_path.name}-{i}").port != node.port
    )
    url = f"{node.url}?key={name}"
    (tmp_path / "logs").mkdir()
    write_chain(tmp_path / "logs", private, url)
    proof = ("--key-file", key_file, "--public-key", public, "--anchor", url)
    code, out, err = cli("audit", "verify", tmp_path / "logs", *proof)
    assert code == 0 and "anchored: " in out, out + err
    shutil.rmtree(tmp_path / "logs")
    (tmp_path / "logs").mkdir()
    write_chain(tmp_path / "logs", private, tmp_path / "elsewhere.jsonl", calls=1)
    code, out, err = cli("audit", "verify", tmp_path / "logs", *proof)
    assert code == 1 and "missing chain" in out, out + err
