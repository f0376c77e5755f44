"""The navigation lights exactly one section: the planner's page of a pipeline
(/planner/pipelines/<id>/) is the Planner's, not also the Pipelines' (a substring test lit
both); a node's page is under Nodes."""

import re

import pytest
from django.test import Client

from fleet.console.context import nav_section
from fleet.nodes.models import HardwareProfile
from fleet.nodes.services import node_register
from fleet.pipelines import services

pytestmark = pytest.mark.django_db


def _find(pattern, text, flags=0, group=0):
    """The match of `pattern` in `text` (failing the test when there is none)."""
    match = re.search(pattern, text, flags)
    assert match is not None, f"{pattern!r} not found"
    return match.group(group)


def _active(page: bytes) -> list[str]:
    nav = _find(rb'<nav class="nav".*?</nav>', page, re.S).decode()
    return re.findall(r'<a href="[^"]*" class="active" aria-current="page">([^<]+)</a>', nav)


@pytest.fixture
def pages(operator):
    pipeline = services.pipeline_create(
        actor=operator, name="nav", target_model="t", draft_model="d"
    )
    node, _ = node_register(
        name="nav-node", profile=HardwareProfile.objects.get(slug="h100-sxm"), roles=["verify"]
    )
    client = Client()
    client.force_login(operator)
    return client, pipeline, node


@pytest.mark.parametrize(
    "path,section",
    [
        ("/planner/pipelines/{p}/", ["Planner"]),
        ("/planner/", ["Planner"]),
        ("/pipelines/{p}/", ["Pipelines"]),
        ("/pipelines/", ["Pipelines"]),
        ("/nodes/", ["Nodes"]),
        ("/nodes/{n}/", ["Nodes"]),
        ("/fleet/", ["Fleet"]),
        ("/account/keys/", ["API keys"]),
        ("/", []),
    ],
)
def test_one_section_is_lit(pages, path, section):
    client, pipeline, node = pages
    page = client.get(path.format(p=pipeline.pk, n=node.pk))
    assert page.status_code == 200
    assert _active(page.content) == section


def test_sections_by_prefix():
    assert nav_section("/planner/pipelines/3/") == "planner"
    assert nav_section("/pipelines/3/") == "pipelines"
    assert nav_section("/wall/links/") == "wall"
    assert nav_section("/somewhere/pipelines/") == ""


def test_the_api_keys_link_is_for_people_with_a_role(outsider, viewer):
    client = Client()
    client.force_login(viewer)
    assert b'href="/account/keys/"' in client.get("/").content
    client.force_login(outsider)
    assert b'href="/account/keys/"' not in client.get("/").content
