"""A Content-Security-Policy on every page, and pages that need no inline script or style
to work under it."""

import re

import pytest
from django.test import Client

from tests.console.test_pages import world  # noqa: F401  (fixture)

pytestmark = pytest.mark.django_db

INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)(?![^>]*application/json)[^>]*>", re.I)
INLINE_HANDLER = re.compile(r"<[^>]+\son[a-z]+\s*=", re.I)
INLINE_STYLE = re.compile(r"<style\b|\sstyle\s*=", re.I)


def _policy(response) -> dict[str, str]:
    header = response["Content-Security-Policy"]
    return dict(part.strip().split(" ", 1) for part in header.split(";") if part.strip())


def test_the_policy_forbids_inline_script_and_foreign_origins(client):
    policy = _policy(client.get("/login/"))
    assert policy["script-src"] == "'self'"
    assert policy["style-src"].split()[0] == "'self'"
    assert all(s.startswith("'sha256-") for s in policy["style-src"].split()[1:])
    assert policy["default-src"] == "'self'" and policy["object-src"] == "'none'"
    assert policy["frame-ancestors"] == "'none'"
    assert "unsafe" not in " ".join(policy.values())


def test_every_page_has_the_policy_and_no_inline_code(world, admin):  # noqa: F811
    carol = Client()
    carol.force_login(admin)
    pages = [
        "/",
        "/fleet/",
        f"/pipelines/{world['pipeline'].pk}/",
        f"/nodes/{world['v'].pk}/",
        "/wall/",
        "/wall/screen/",
        "/wall/links/",
        "/nodes/",
        "/nodes/register",
        "/pipelines/",
        "/pipelines/new",
        "/planner/",
        "/planner/what-if",
        f"/planner/pipelines/{world['pipeline'].pk}/",
        "/api/v1/docs/",
    ]
    for path in pages:
        response = carol.get(path)
        assert response.status_code == 200, path
        assert "script-src 'self'" in response["Content-Security-Policy"], path
        html = response.content.decode()
        for name, pattern in (
            ("script", INLINE_SCRIPT),
            ("handler", INLINE_HANDLER),
            ("style", INLINE_STYLE),
        ):
            found = pattern.search(html)
            assert found is None, (
                f"{path}: inline {name}: {html[found.start() : found.start() + 120]}"
            )
    login = Client().get("/login/")
    assert "Content-Security-Policy" in login
    assert INLINE_SCRIPT.search(login.content.decode()) is None
