"""The approvals page: plain HTML forms, no JavaScript, every value escaped.

A person signs in once with the token (a form, never a URL), then sees each pending tool call with
its arguments and the run's usage, and decides with buttons. Each form carries the CSRF token of
the session; the page asks browsers not to cache it, frame it or send a referrer.
"""

from __future__ import annotations

import json
import time
from html import escape
from typing import Any

_STYLE = """
body{font:15px/1.45 system-ui,sans-serif;margin:0 auto;max-width:54rem;padding:1.5rem;color:#1d232b}
h1{font-size:1.4rem;margin:0}header{display:flex;gap:1rem;align-items:center;justify-content:space-between}
.request{border:1px solid #cfd6df;border-radius:.5rem;padding:1rem;margin:1rem 0}
.request h2{font-size:1.1rem;margin:0 0 .25rem}.meta{color:#55606e;font-size:.85rem;margin:0 0 .5rem}
pre,textarea{background:#f4f6f8;border-radius:.3rem;padding:.6rem;font:13px/1.4 ui-monospace,monospace;
width:100%;box-sizing:border-box;white-space:pre-wrap;overflow-wrap:anywhere}
textarea{min-height:6rem;border:1px solid #cfd6df}
.actions{display:flex;flex-wrap:wrap;gap:.5rem;align-items:center}form{margin:0}
button{font:inherit;padding:.35rem .9rem;border-radius:.3rem;border:1px solid #8893a0;background:#fff;
cursor:pointer}button.approve{background:#1f7a3d;border-color:#1f7a3d;color:#fff}
button.reject{border-color:#b3261e;color:#b3261e}
input[type=text],input[type=password]{font:inherit;padding:.3rem .5rem;border:1px solid #8893a0;
border-radius:.3rem}
.notice{padding:.6rem .8rem;border-radius:.3rem;background:#fff4e5;border:1px solid #f0b35a}
.empty{color:#55606e}
"""


def _document(title: str, body: str, refresh_s: int | None = None) -> bytes:
    refresh = f'<meta http-equiv="refresh" content="{refresh_s}">' if refresh_s else ""
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"{refresh}<title>{escape(title)}</title><style>{_STYLE}</style></head>"
        f"<body>{body}</body></html>"
    ).encode()


def _notice(message: str) -> str:
    return f'<p class="notice" role="alert">{escape(message)}</p>' if message else ""


def login_page(title: str, base: str, error: str = "") -> bytes:
    body = (
        f"<header><h1>{escape(title)}</h1></header>{_notice(error)}"
        f'<form method="post" action="{escape(base)}session" class="login">'
        '<p><label>Access token <input type="password" name="token" id="token" autocomplete="off" '
        'required></label> <button type="submit" id="sign-in">Sign in</button></p></form>'
    )
    return _document(title, body)


def _age(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 60}m {seconds % 60}s" if seconds >= 60 else f"{seconds}s"


def _request(record: dict[str, Any], base: str, csrf: str, now: float) -> str:
    rid = escape(str(record.get("id", "")))
    base = escape(base)
    arguments = json.dumps(record.get("arguments"), indent=2, sort_keys=True, ensure_ascii=False)
    usage = record.get("usage") or {}
    limits = usage.get("limits") or {}
    spent = (
        f"{usage.get('steps_used', '?')}/{limits.get('max_steps', '?')} steps, "
        f"${float(usage.get('cost_usd_used') or 0.0):.4f}/{limits.get('max_cost_usd', '?')}"
    )
    hidden = f'<input type="hidden" name="csrf" value="{escape(csrf)}">'
    waited = _age(now - float(record.get("created", now)))
    left = _age(float(record.get("expires", now)) - now)
    chain = escape(str(record.get("chain_id", "")))
    meta = f"chain {chain} · waiting {waited} · expires in {left} · {escape(spent)}"
    return (
        f'<section class="request" id="request-{rid}" data-id="{rid}">'
        f"<h2>{escape(str(record.get('tool', '')))}</h2><p class=meta>{meta}</p>"
        f'<pre class="arguments">{escape(arguments)}</pre><div class="actions">'
        f'<form method="post" action="{base}{rid}/approve">{hidden}'
        '<button type="submit" class="approve">Approve</button></form>'
        f'<form method="post" action="{base}{rid}/reject">{hidden}'
        '<input type="text" name="message" placeholder="Reason (optional)" aria-label="Reason"> '
        '<button type="submit" class="reject">Reject</button></form></div>'
        f'<details><summary>Edit arguments</summary><form method="post" action="{base}{rid}/edit">{hidden}'
        f'<textarea name="arguments" aria-label="Arguments (JSON)">{escape(arguments)}</textarea>'
        '<button type="submit" class="edit">Run with these arguments</button></form></details></section>'
    )


def queue_page(title: str, base: str, records: list[dict[str, Any]], csrf: str, notice: str = "") -> bytes:
    """``base``: the app's own path with a trailing slash (links and forms are absolute to it)."""
    now = time.time()
    items = "".join(_request(r, base, csrf, now) for r in records)
    if not items:
        items = '<p class="empty">No pending requests. This page refreshes itself every 10 seconds.</p>'
    body = (
        f"<header><h1>{escape(title)}</h1><div class=actions>"
        f'<a href="{escape(base)}" id="refresh">Refresh</a>'
        f'<form method="post" action="{escape(base)}logout">'
        f'<input type="hidden" name="csrf" value="{escape(csrf)}">'
        '<button type="submit">Sign out</button></form></div></header>'
        f"{_notice(notice)}<main>{items}</main>"
    )
    # New requests appear by themselves only while there is nothing to decide: a refresh would
    # throw away a reason someone is typing.
    return _document(title, body, refresh_s=None if records else 10)
