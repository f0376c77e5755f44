"""How a node worker speaks to the control plane's API: its token in every request, and the
session it asks for at boot (who it is, its placement, its keys). No database: the node
token authenticates it (`inference.serving.node_session` answers)."""

from __future__ import annotations

import logging
import time

from django.core.exceptions import ImproperlyConfigured

logger = logging.getLogger(__name__)

SESSION_PATH = "/api/v1/node-session"


def api_headers(token: str) -> dict[str, str]:
    """The node token, and X-Forwarded-Proto when TANDEM_API_FORWARDED_PROTO says the node
    reaches the web server inside a private network, past the TLS proxy (compose)."""
    from fleet.env import env_str

    headers = {"Authorization": f"Bearer {token}"}
    if proto := env_str("TANDEM_API_FORWARDED_PROTO", ""):
        headers["X-Forwarded-Proto"] = proto
    return headers


def fetch_session(api_url: str, token: str, *, timeout_s: float = 300.0) -> dict:
    """The node's session from the control plane (`inference.serving.node_session`). Waits
    for the API while it starts (`manage.py up` starts the web server after the workers);
    a refused token fails at once."""
    import httpx

    if not api_url:
        raise ImproperlyConfigured(
            "TANDEM_API_URL is required: a node worker learns its node, placement and signing "
            "key from the control plane's API (it holds no database credentials)"
        )
    deadline, said = time.monotonic() + timeout_s, False
    url = api_url.rstrip("/") + SESSION_PATH
    headers = api_headers(token)
    while True:
        try:
            r = httpx.get(url, headers=headers, timeout=10)
            if r.status_code in (401, 403):
                raise ImproperlyConfigured(f"the control plane refused this node token: {r.text}")
            r.raise_for_status()
            return r.json()
        except (httpx.HTTPError, ValueError) as exc:
            if time.monotonic() > deadline:
                raise ImproperlyConfigured(f"no answer from {url} in {timeout_s:g}s") from exc
            if not said:
                logger.warning("waiting for the control plane at %s (%s)", url, exc)
                said = True
            time.sleep(1.0)


def check_node(session: dict, node_ref: str) -> None:
    """TANDEM_NODE_ID, when given, must name the token's node."""
    if node_ref and node_ref not in (str(session["node"]), session["name"]):
        raise ImproperlyConfigured(
            f"TANDEM_NODE_ID is {node_ref!r}, but the token is node {session['name']!r}'s"
        )
