"""Live console pages: login and roles, first render from the snapshot, wall links."""

import time

import pytest
from django.contrib.staticfiles import finders
from django.test import Client

from fleet.accounts.models import WallLink
from fleet.accounts.wall_links import wall_link_create
from fleet.telemetry.aggregator import Aggregator
from fleet.telemetry.ingest import STREAMS, client, encode
from fleet.telemetry.registry import load_registry
from fleet.telemetry.snapshot import LIVE_KEY
from tests.factories import PASSWORD
from tests.telemetry import factories as f

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def clean_live_state():
    client().delete(LIVE_KEY, *STREAMS)


def _login(user) -> Client:
    c = Client()
    assert c.login(username=user.username, password=PASSWORD)
    return c


@pytest.fixture
def world():
    p = f.pipeline()
    v, token = f.node(name="gpu-1")
    d, _ = f.node(name="sram-1", simulated=True)
    f.place(v, p, "verify")
    f.place(d, p, "draft")
    agg = Aggregator()
    agg.set_registry(load_registry())
    now = time.time()
    agg.ingest_entry(encode(v.id, f.verify_sample(ts=now), key=f.key_of(v.id, token)), now=now)
    snap = agg.build(now)["snapshot"]
    client().hset(LIVE_KEY, mapping=snap)
    return {"pipeline": p, "v": v, "d": d}


def _pages(world):
    return [
        "/fleet/",
        f"/pipelines/{world['pipeline'].pk}/",
        f"/nodes/{world['v'].pk}/",
        "/wall/",
    ]


def test_pages_need_a_login_and_the_view_role(world, outsider):
    anonymous = Client()
    for url in _pages(world):
        response = anonymous.get(url)
        assert response.status_code == 302 and "/login/" in response["Location"], url
    mallory = _login(outsider)
    for url in _pages(world):
        assert mallory.get(url).status_code == 403, url


def test_pages_render_the_live_state_for_a_viewer(world, viewer):
    alice = _login(viewer)
    fleet = alice.get("/fleet/")
    assert fleet.status_code == 200
    body = fleet.content.decode()
    assert "gpu-1" in body and "sram-1" in body
    assert "300 W" in body and "measured · NVML" in body  # the live snapshot, server-rendered
    assert "pill-simulated" in body
    pipeline = alice.get(f"/pipelines/{world['pipeline'].pk}/").content.decode()
    assert "60.0%" in pipeline  # acceptance rate from the snapshot
    assert 'id="ch-accept"' in pipeline and "plotly/plotly-basic.min.js" in pipeline
    assert 'id="actions"' not in pipeline  # viewers get no action controls
    node = alice.get(f"/nodes/{world['v'].pk}/").content.decode()
    assert "Generations it serves" in node and "Test GPU" in node
    assert alice.get("/pipelines/999999/").status_code == 404
    assert alice.get("/nodes/999999/").status_code == 404


def test_operators_get_the_pipeline_actions(world, operator):
    body = _login(operator).get(f"/pipelines/{world['pipeline'].pk}/").content.decode()
    assert 'id="actions"' in body


def test_fleet_page_with_no_aggregator_running(viewer):
    body = _login(viewer).get("/fleet/").content.decode()
    assert "No nodes yet" in body


def test_plotly_is_its_basic_bundle():
    path = finders.find("vendor/plotly/plotly-basic.min.js")
    assert path, "plotly.js-basic-dist-min is missing: run make (npm ci)"
    with open(path, encoding="utf-8") as fh:
        assert "plotly.js (basic - minified)" in fh.read(200)


def test_wall_by_signed_link_only_opens_the_wall(world, admin):
    link, token = wall_link_create(name="NOC", actor=admin)
    screen = Client()
    response = screen.get("/wall/screen/")  # the page: no data, no token in the URL
    assert response.status_code == 200
    assert b"Fleet wall" in response.content and response["Referrer-Policy"] == "no-referrer"
    data = screen.get("/wall/data", HTTP_X_WALL_TOKEN=token)  # the figures: token in a header
    assert data.status_code == 200 and "fleet_series" in data.json()
    assert screen.get("/wall/data").status_code == 401
    for url in ("/fleet/", f"/pipelines/{world['pipeline'].pk}/", "/api/v1/pipelines"):
        assert screen.get(url, HTTP_X_WALL_TOKEN=token).status_code in (302, 401, 403), url
    assert screen.get("/wall/data", HTTP_X_WALL_TOKEN=f"{token[:-3]}abc").status_code == 403
    link.revoked_at = link.created_at
    link.save()
    assert screen.get("/wall/data", HTTP_X_WALL_TOKEN=token).status_code == 403


def test_wall_links_page_is_for_admins(admin, operator):
    assert _login(operator).get("/wall/links/").status_code == 403
    carol = _login(admin)
    response = carol.post("/wall/links/", {"name": "NOC left"})
    assert response.status_code == 200
    assert b"/wall/screen/#token=" in response.content
    link = WallLink.objects.get(name="NOC left")
    assert _login(operator).post(f"/wall/links/{link.pk}/revoke").status_code == 403
    response = carol.post(f"/wall/links/{link.pk}/revoke")
    assert response.status_code == 302
    link.refresh_from_db()
    assert link.revoked_at is not None
    assert carol.post("/wall/links/", {"name": ""}).status_code == 200


def test_home_shows_the_live_overview_to_viewers_only(world, viewer, outsider):
    body = _login(viewer).get("/").content.decode()
    assert 'id="overview"' in body and "llama-pair" in body and "js/overview.js" in body
    body = _login(outsider).get("/").content.decode()
    assert 'id="overview"' not in body and "llama-pair" not in body


def test_pages_render_when_redis_is_down(world, viewer, settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there (clients follow it)
    alice = _login(viewer)
    for url in _pages(world):
        assert alice.get(url).status_code == 200, url
