"""Issue 25 item 1: the pipeline and node pages are the console's (the walls that follow from
it, pipelines -> inference and nodes -> pipelines/inference, are in tests/test_walls.py); the
pages kept their URLs."""

from __future__ import annotations

from django.urls import resolve, reverse


def test_the_pages_kept_their_urls_and_live_in_the_console():
    for name, args, url in [
        ("pipelines:list", (), "/pipelines/"),
        ("pipelines:new", (), "/pipelines/new"),
        ("pipelines:act", (3, "drain"), "/pipelines/3/act/drain"),
        ("nodes:list", (), "/nodes/"),
        ("nodes:register", (), "/nodes/register"),
        ("nodes:act", (5, "retire"), "/nodes/5/act/retire"),
    ]:
        assert reverse(name, args=args) == url
        assert resolve(url).func.__module__.startswith("fleet.console."), url
