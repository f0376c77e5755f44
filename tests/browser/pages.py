"""What the browser tests do on Tandem's pages again and again: log in, collect CSP refusals,
wait for a live page, create a wall link on the wall-links page."""

from __future__ import annotations

from tests.conftest import PASSWORD


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
