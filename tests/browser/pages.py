"""What the browser tests do on Tandem's pages again and again: log in, collect CSP refusals,
wait for a live page, create a wall link on the wall-links page."""

from __future__ import annotations

import json
import time

from tests.factories import PASSWORD


def login(page, base: str, username: str) -> None:
    page.goto(f"{base}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/login/" not in url)


def csp_violations(page) -> list[str]:
    """Console messages of Content-Security-Policy refusals (inline code, other origins)."""
    seen: list[str] = []
    page.on(
        "console",
        lambda m: (
            seen.append(f"{page.url}: {m.text}") if "Content Security Policy" in m.text else None
        ),
    )
    return seen


def wait_live(page, timeout_ms: int = 15000) -> None:
    page.wait_for_selector("#live-status.live-live", timeout=timeout_ms)


def wall_link_from_page(chromium, base: str, username: str, name: str):
    """An admin creates a wall link named `name` on the wall-links page and copies it:
    (the admin's browser context, its page, the wall's URL)."""
    context = chromium.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    login(page, base, username)
    page.goto(f"{base}/wall/links/")
    page.fill("#wall-name", name)
    page.click("form.toolbar button[type=submit]")
    return context, page, page.text_content("#wall-url").strip()


def frame_log(page) -> list[tuple[float, str, object]]:
    """(wall clock, message type, its ts) of every websocket frame the page receives, and the
    opening and closing of its sockets: what a failing live-status wait prints."""
    seen: list[tuple[float, str, object]] = []

    def received(payload) -> None:
        try:
            message = json.loads(payload)
        except (TypeError, ValueError):
            return
        if isinstance(message, dict):
            seen.append((time.time(), str(message.get("type")), message.get("ts")))

    def opened(ws) -> None:
        seen.append((time.time(), "open", None))
        ws.on("framereceived", received)
        ws.on("close", lambda _ws: seen.append((time.time(), "close", None)))

    page.on("websocket", opened)
    # and the status line's classes as they change, in window.__liveStates
    page.add_init_script(
        "window.__liveStates = []; setInterval(() => { const el = "
        "document.getElementById('live-status'); const s = window.__liveStates; "
        "const now = el && el.className + ': ' + el.textContent.trim(); "
        "if (el && (!s.length || s[s.length - 1][1] !== now)) s.push([Date.now(), now]); }, 100);"
    )
    return seen


def live_history(page, frames: list[tuple[float, str, object]], since: float) -> str:
    """What a page's live socket did since `since` (frames from `frame_log`, status changes from
    its init script), in seconds after `since`: the message of a failed live-status check."""
    log = [
        (round(t - since, 2), kind, round(ts - since, 2) if isinstance(ts, float | int) else ts)
        for t, kind, ts in frames
    ]
    states = page.evaluate("window.__liveStates || []")
    changes = [(round(t / 1000 - since, 2), state) for t, state in states]
    return f"frames (s, type, ts - since): {log[-60:]}; live-status changes: {changes[-30:]}"
