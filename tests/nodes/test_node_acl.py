"""A node acts only as itself (issue 23): holding one drafter's credentials -- its token, and the
Redis user its session hands it -- every cross-node action is refused by the test run's real
Redis (NOPERM) or ignored by its reader; its own actions still work."""

from __future__ import annotations

import json
import uuid

import pytest
import redis
from django.conf import settings
from django.test import override_settings
from rest_framework.test import APIClient

from fleet.nodes import redis_acl
from fleet.nodes.services import node_register, node_token_revoke
from fleet.nodes.signing import control_key
from fleet.pipelines.models import Pipeline, Placement
from fleet.telemetry.ingest import STREAM as TELEMETRY
from inference import node_reports, wire
from inference.worker.engine_loop import BaseLoop
from tests.worker.helpers import profile

pytestmark = pytest.mark.django_db


def _pipeline(name: str) -> dict:
    pipeline = Pipeline.objects.create(name=name, target_model="t", draft_model="d")
    out: dict = {"pipeline": pipeline}
    for role in ("draft", "verify"):
        node, token = node_register(name=f"{name}-{role}", profile=profile(), roles=[role])
        Placement.objects.create(pipeline=pipeline, node=node, role=role)
        out[role], out[f"{role}_token"] = node, token
    return out


def _session(token: str) -> dict:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    response = client.get("/api/v1/node-session")
    assert response.status_code == 200, response.content
    return response.json()


def _as_node(session: dict) -> redis.Redis:
    url = redis_acl.node_url(settings.REDIS_URL, session["node"], session["redis"]["password"])
    return redis.Redis.from_url(url)


@pytest.fixture
def fleet():
    a, b = _pipeline("acl-a"), _pipeline("acl-b")
    for node in (a["draft"], a["verify"], b["draft"], b["verify"]):
        wire.discard_rounds(node.pk)  # ids repeat across tests; this Redis does not
    session = _session(a["draft_token"])
    yield {"a": a, "b": b, "session": session, "r": _as_node(session)}
    admin = redis.Redis.from_url(settings.REDIS_URL)
    for node in (a["draft"], a["verify"], b["draft"], b["verify"]):
        admin.execute_command("ACL", "DELUSER", redis_acl.username(node.pk))


def refused(action) -> bool:
    try:
        action()
    except redis.exceptions.NoPermissionError:
        return True
    return False


def test_the_session_hands_the_node_its_own_redis_user(fleet):
    s, a = fleet["session"], fleet["a"]
    assert s["redis"]["username"] == f"node-{a['draft'].pk}"
    assert s["control_key"] == control_key(a["draft"].pk)
    assert sorted(s["placement"]["peers"]) == sorted([a["draft"].pk, a["verify"].pk])
    assert fleet["r"].ping()
    # a wrong password is no way in
    bad = redis_acl.node_url(settings.REDIS_URL, a["draft"].pk, "x" * 64)
    with pytest.raises(redis.exceptions.AuthenticationError):
        redis.Redis.from_url(bad).ping()


def test_cross_node_actions_are_refused(fleet):
    r, a, b = fleet["r"], fleet["a"], fleet["b"]
    v_b, d_b, v_a = b["verify"].pk, b["draft"].pk, a["verify"].pk
    gen = uuid.uuid4()
    admin = redis.Redis.from_url(settings.REDIS_URL)
    admin.xadd(wire.stream_key(v_b, gen), {"e": json.dumps(wire.tokens_event([1], "secret", 1))})
    admin.rpush(wire.round_key(v_b), json.dumps(["start", {"gen": str(gen), "prompt": "secret"}]))
    injected = {"e": json.dumps(wire.tokens_event([2], "INJECTED", 2))}
    actions = {
        # write into another verifier's generation stream (another pipeline's, and its own's)
        "xadd other stream": lambda: r.xadd(wire.stream_key(v_b, gen), injected),
        "xadd own pipeline verifier stream": lambda: r.xadd(wire.stream_key(v_a, gen), injected),
        # read another node's prompts and outputs
        "xrange other stream": lambda: r.xrange(wire.stream_key(v_b, gen)),
        "xread other stream": lambda: r.xread({wire.stream_key(v_b, gen): "0"}),
        "xrange ledger": lambda: r.xrange(node_reports.STREAM),
        "xrange telemetry": lambda: r.xrange(f"{TELEMETRY}:0"),
        "lrange other inbox": lambda: r.lrange(wire.round_key(v_b), 0, -1),
        "get other inspect": lambda: r.get(wire.inspect_key(v_b)),
        "lrange others' outbox": lambda: r.lrange(wire.peer_key(v_b, d_b), 0, -1),
        "keys": lambda: r.keys("*"),
        "scan": lambda: r.scan(0),
        # push into another pipeline's node inbox, or forge another node's outbox
        "rpush other inbox": lambda: r.rpush(wire.round_key(v_b), '["start", {}]'),
        "rpush own pipeline inbox": lambda: r.rpush(wire.round_key(v_a), '["claimed", {}]'),
        "rpush as another node": lambda: r.rpush(wire.peer_key(v_b, d_b), '["results", {}]'),
        # a cancel through another node's Celery queue, or on a channel
        "lpush other celery queue": lambda: r.lpush(wire.node_queue(v_b), "{}"),
        "lpush own pipeline celery queue": lambda: r.lpush(wire.node_queue(v_a), "{}"),
        "sadd other binding": lambda: r.sadd(f"_kombu.binding.{wire.node_queue(v_b)}", "x"),
        "publish": lambda: r.publish("/0.celery.pidbox", "{}"),
        "delete other stream": lambda: r.delete(wire.stream_key(v_b, gen)),
        "acl": lambda: r.execute_command("ACL", "LIST"),
        "config": lambda: r.config_get("*"),
        "flushall": lambda: r.flushall(),
    }
    allowed = [name for name, action in actions.items() if not refused(action)]
    assert allowed == []
    events = wire.read_all(gen, node=v_b)
    assert wire.collect_text(events) == "secret"  # nothing got in


def test_what_a_node_writes_on_its_own_keys_about_others_is_ignored(fleet):
    """Its outbox to another pipeline's verifier is never read there; read by a peer, it
    carries no control kind and names its real sender."""
    r, a, b = fleet["r"], fleet["a"], fleet["b"]
    d_a, v_b, d_b = a["draft"].pk, b["verify"].pk, b["draft"].pk
    outbox = wire.peer_key(d_a, v_b)
    r.rpush(outbox, json.dumps(["start", {"gen": "g", "prompt_tokens": [1]}]))
    r.rpush(outbox, json.dumps(["drafts", {"drafter": d_b, "drafts": []}]))
    assert wire.receive(v_b, timeout_s=0.05, peers=[d_b]) == []  # not B's peer: never read
    got = wire.receive(v_b, timeout_s=0.05, peers=[d_a])  # even if it were listened to
    assert got == [("drafts", {"drafter": d_a, "drafts": []})]


def test_only_the_control_planes_signed_cancels_reach_a_node(fleet):
    v_b = fleet["b"]["verify"].pk

    class Loop(BaseLoop):
        role = "verify"

    loop = Loop(node_id=v_b, pipeline_id=0, config={}, control_key=control_key(v_b))
    payload = {"gen": "g1"}
    forged = {**payload, "sig": "0" * 64}
    other = {**payload, "sig": wire.control_signature(control_key(v_b + 1), v_b, "cancel", payload)}
    misdirected = {
        **payload,
        "sig": wire.control_signature(control_key(v_b), v_b + 1, "cancel", payload),
    }
    for bad in (payload, forged, other, misdirected):
        assert not loop.accept_control("cancel", bad)
    good = {**payload, "sig": wire.control_signature(control_key(v_b), v_b, "cancel", payload)}
    assert loop.accept_control("cancel", good)
    assert loop.inbox.get_nowait() == ("cancel", payload)
    assert loop.inbox.empty()


def test_a_nodes_own_actions_still_work(fleet):
    r, a, s = fleet["r"], fleet["a"], fleet["session"]
    d_a, v_a = a["draft"].pk, a["verify"].pk
    url = redis_acl.node_url(settings.REDIS_URL, d_a, s["redis"]["password"])
    gen = uuid.uuid4()
    with override_settings(REDIS_URL=url):
        wire.publish(gen, wire.tokens_event([1], "mine", 1), node=d_a)
        wire.publish_many([(gen, wire.done_event("stop", 1, 1))], node=d_a)
        wire.send_from(d_a, v_a, "drafts", {"drafts": []})
        entry = node_reports.encode(d_a, {"kind": "first_token", "ids": [], "at": 1.0}, key="k")
        r.xadd(node_reports.STREAM, entry)
        r.xadd(f"{TELEMETRY}:{d_a % 16}", {"p": "x"})
        r.set(wire.inspect_key(d_a), "{}", ex=60)
        r.lpush(wire.node_queue(d_a), "{}")
        assert r.brpop([wire.node_queue(d_a)], timeout=1) is not None
    wire.send(d_a, "config", {"pipeline": a["pipeline"].pk, "peers": [v_a]})  # the admin's
    with override_settings(REDIS_URL=url):
        assert wire.receive(d_a, timeout_s=1)[0][0] == "config"
    assert wire.collect_text(wire.read_all(gen, node=d_a)) == "mine"
    v_url = redis_acl.node_url(
        settings.REDIS_URL, v_a, _session(a["verify_token"])["redis"]["password"]
    )
    with override_settings(REDIS_URL=v_url):  # the verifier reads its drafter's outbox
        assert wire.receive(v_a, timeout_s=1, peers=[d_a]) == [
            ("drafts", {"drafts": [], "drafter": d_a})
        ]


def test_a_revoked_token_loses_its_redis_password(fleet):
    a = fleet["a"]
    assert fleet["r"].ping()
    with pytest.raises(redis.exceptions.AuthenticationError):
        with override_settings():
            from django.db import transaction

            with transaction.atomic():
                node_token_revoke(node=a["draft"])
            redis_acl.sync_node(a["draft"].pk)  # what on_commit runs (no commit in this test)
            _as_node(fleet["session"]).ping()


def test_node_users_come_back_when_redis_runs_as_a_new_process(fleet):
    """ACL users are in Redis's memory only (not in its append-only file): after a restart
    the control plane's beat task sets them again, so running workers reconnect as
    themselves. A restart is seen as a new run_id."""
    admin = redis.Redis.from_url(settings.REDIS_URL)
    redis_acl.resync_after_restart(client=admin)
    assert redis_acl.resync_after_restart(client=admin) == 0  # same process: nothing to do
    # what a restart loses: the users (the stored run id survives in the AOF, but is stale)
    admin.execute_command("ACL", "DELUSER", redis_acl.username(fleet["a"]["draft"].pk))
    admin.set(redis_acl.RUN_ID_KEY, "an-older-redis-process")
    with pytest.raises(redis.exceptions.AuthenticationError):
        _as_node(fleet["session"]).ping()
    assert redis_acl.resync_after_restart(client=admin) >= 4
    assert _as_node(fleet["session"]).ping()
