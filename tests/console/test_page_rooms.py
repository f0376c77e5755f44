"""Issue 25 item 1: the pipeline and node pages are the console's, so neither domain app
imports the data plane (or, for nodes, the pipelines app) to draw a page. The whole walls
(pipelines → inference, nodes → pipelines) are guarded in tests/test_walls.py once the last
non-page crossings (the config push, the node ACL key patterns) have moved; this test holds
the page part now, and the URLs the pages kept."""

from __future__ import annotations

from django.urls import resolve, reverse

from tests.test_walls import ROOT, crossings, source_files

# Crossings that are not pages, owned by issue 25's other items (2: the config push by a
# signal; the node ACL's key patterns from inference.wire).
NOT_PAGES = {"fleet/pipelines/bookkeeping.py", "fleet/nodes/redis_acl.py"}


def _page_crossings(app: str, forbidden: tuple[str, ...]) -> list[str]:
    files = [p for p in source_files(app) if str(p.relative_to(ROOT)) not in NOT_PAGES]
    return crossings(files, forbidden)


def test_the_pipelines_app_imports_no_data_plane():
    assert _page_crossings("fleet/pipelines", ("inference",)) == []


def test_the_nodes_app_imports_neither_pipelines_nor_the_data_plane():
    assert _page_crossings("fleet/nodes", ("inference", "fleet.pipelines", "fleet.console")) == []


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
