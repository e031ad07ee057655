"""The approvals page: plain HTML forms, no JavaScript, every value escaped and shown as it is.

A person signs in once with their token (a form, never a URL), then sees each pending tool call
(50 a page) with its arguments and the run's usage, and decides with buttons. Control, bidi and
zero-width characters in names and arguments are never rendered: each is shown as its escape
(``\\u202e``) in a highlighted mark, so what a person reads is what will run. Arguments over
4 KiB are cut, the whole value one click away. Each form carries the CSRF token of the session;
the page asks browsers not to cache it, frame it or send a referrer.
"""

from __future__ import annotations

import json
import time
import unicodedata
from html import escape
from typing import Any

PAGE_SIZE = 50
MAX_SHOWN = 4096  # bytes of arguments shown before "show all"
_HIDDEN = frozenset({"Cc", "Cf", "Co", "Cs", "Cn", "Zl", "Zp"})


def _suspicious(char: str, keep_newlines: bool) -> bool:
    if char == " " or (keep_newlines and char == "\n"):
        return False
    category = unicodedata.category(char)
    return category in _HIDDEN or (category == "Zs")  # Zs: every space but " " (NBSP, en space, ...)


def _escape_code(char: str) -> str:
    code = ord(char)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def visible(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` as HTML: escaped, and every invisible or reordering character shown as its escape
    in a ``<mark class="hidden-char">`` titled with its name."""
    out = []
    for char in text:
        if _suspicious(char, keep_newlines):
            name = unicodedata.name(char, "unnamed character")
            title = escape(f"U+{ord(char):04X} {name}")
            out.append(f'<mark class="hidden-char" title="{title}">{_escape_code(char)}</mark>')
        else:
            out.append(escape(char))
    return "".join(out)


def _json_escaped(text: str) -> str:
    """JSON text with its suspicious characters as JSON escapes (for the edit box: same value)."""
    out = []
    for char in text:
        if _suspicious(char, keep_newlines=True):
            out.append(json.dumps(char)[1:-1] if ord(char) > 0xFFFF else f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return "".join(out)


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
mark.hidden-char{background:#ffd5d5;color:#8a1111;border:1px solid #b3261e;border-radius:.2rem;
padding:0 .15rem;font-weight:600}
.pages{display:flex;gap:1rem;align-items:center;margin:1rem 0}.who{color:#55606e}
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


def _arguments(arguments: str) -> str:
    data = arguments.encode("utf-8", "surrogatepass")
    if len(data) <= MAX_SHOWN:
        return f'<pre class="arguments">{visible(arguments, keep_newlines=True)}</pre>'
    head = data[:MAX_SHOWN].decode("utf-8", "ignore")
    return (
        f'<pre class="arguments cut">{visible(head, keep_newlines=True)}\n…</pre>'
        f'<details class="full-arguments"><summary>Show all {len(data):,} bytes</summary>'
        f'<pre class="arguments full">{visible(arguments, keep_newlines=True)}</pre></details>'
    )


def _request(record: dict[str, Any], base: str, csrf: str, now: float) -> str:
    rid = escape(str(record.get("id", "")))
    base = escape(base)
    arguments = json.dumps(record.get("arguments"), indent=2, sort_keys=True, ensure_ascii=False)
    usage = record.get("usage") or {}
    limits = usage.get("limits") or {} if isinstance(usage, dict) else {}
    usage = usage if isinstance(usage, dict) else {}
    try:
        cost = float(usage.get("cost_usd_used") or 0.0)
    except (TypeError, ValueError):
        cost = 0.0
    steps = f"{usage.get('steps_used', '?')}/{limits.get('max_steps', '?')} steps"
    spent = f"{steps}, ${cost:.4f}/{limits.get('max_cost_usd', '?')}"
    hidden = f'<input type="hidden" name="csrf" value="{escape(csrf)}">'
    waited = _age(now - _number(record.get("created"), now))
    left = _age(_number(record.get("expires"), now) - now)
    chain = visible(str(record.get("chain_id", "")))
    meta = f"chain {chain} · waiting {waited} · expires in {left} · {visible(spent)}"
    return (
        f'<section class="request" id="request-{rid}" data-id="{rid}">'
        f'<h2 class="tool">{visible(str(record.get("tool", "")))}</h2><p class=meta>{meta}</p>'
        f'{_arguments(arguments)}<div class="actions">'
        f'<form method="post" action="{base}{rid}/approve">{hidden}'
        '<button type="submit" class="approve">Approve</button></form>'
        f'<form method="post" action="{base}{rid}/reject">{hidden}'
        '<input type="text" name="message" placeholder="Reason (optional)" aria-label="Reason"> '
        '<button type="submit" class="reject">Reject</button></form></div>'
        f'<details><summary>Edit arguments</summary><form method="post" action="{base}{rid}/edit">{hidden}'
        f'<textarea name="arguments" aria-label="Arguments (JSON)">{escape(_json_escaped(arguments))}'
        "</textarea>"
        '<button type="submit" class="edit">Run with these arguments</button></form></details></section>'
    )


def _number(value: Any, default: float) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


def _pages(base: str, page: int, total: int) -> str:
    pages = max(1, -(-total // PAGE_SIZE))
    if pages == 1:
        return ""
    links = []
    if page > 1:
        links.append(f'<a href="{escape(base)}?page={page - 1}" id="newer">Newer</a>')
    if page < pages:
        links.append(f'<a href="{escape(base)}?page={page + 1}" id="older">Older</a>')
    return f'<nav class="pages">Page {page} of {pages} ({total} pending) {" ".join(links)}</nav>'


def queue_page(
    title: str,
    base: str,
    records: list[dict[str, Any]],
    csrf: str,
    notice: str = "",
    who: str = "",
    page: int = 1,
    total: int | None = None,
) -> bytes:
    """``base``: the app's own path with a trailing slash (links and forms are absolute to it)."""
    now = time.time()
    total = len(records) if total is None else total
    items = "".join(_request(r, base, csrf, now) for r in records)
    if not items:
        items = '<p class="empty">No pending requests. This page refreshes itself every 10 seconds.</p>'
    body = (
        f"<header><h1>{escape(title)}</h1><div class=actions>"
        f'<span class="who" id="signed-in">Signed in as {visible(who)}</span>'
        f'<a href="{escape(base)}" id="refresh">Refresh</a>'
        f'<form method="post" action="{escape(base)}logout">'
        f'<input type="hidden" name="csrf" value="{escape(csrf)}">'
        '<button type="submit">Sign out</button></form></div></header>'
        f"{_notice(notice)}{_pages(base, page, total)}<main>{items}</main>{_pages(base, page, total)}"
    )
    # New requests appear by themselves only while there is nothing to decide: a refresh would
    # throw away a reason someone is typing.
    return _document(title, body, refresh_s=None if records else 10)
