"""The telemetry signing key is not in the database: it is derived with SECRET_KEY, bound to
one node and one token, and handed to a remote agent only in its own heartbeat reply."""

import time
from types import SimpleNamespace

import pytest
from rest_framework.test import APIClient

from fleet.telemetry.aggregator import Aggregator
from fleet.telemetry.ingest import client, encode, stream_of
from fleet.telemetry.registry import load_registry
from inference.worker.agent import Agent
from tests.telemetry import factories as f

pytestmark = pytest.mark.django_db


def _agg(now: float) -> Aggregator:
    agg = Aggregator(clock=lambda: now)
    agg.set_registry(load_registry())
    return agg


def test_what_the_database_holds_does_not_sign_a_sample():
    v, token = f.node(name="gpu-1")
    [stored_digest] = v.tokens.values_list("token_hash", flat=True)
    now = time.time()
    agg = _agg(now)
    assert not agg.ingest_entry(encode(v.id, f.verify_sample(ts=now), key=stored_digest), now=now)
    assert agg.dropped["bad_signature"] == 1
    signed = encode(v.id, f.verify_sample(ts=now), key=f.key_of(v.id, token))
    assert agg.ingest_entry(signed, now=now)


def test_the_key_depends_on_the_server_secret(settings):
    v, token = f.node(name="gpu-1")
    key = f.key_of(v.id, token)
    settings.SECRET_KEY = "another-deployment"
    assert f.key_of(v.id, token) != key
    now = time.time()
    agg = _agg(now)  # keys derived with the new secret
    assert not agg.ingest_entry(encode(v.id, f.verify_sample(ts=now), key=key), now=now)
    assert agg.dropped["bad_signature"] == 1


def test_a_remote_agent_gets_its_key_in_its_heartbeat_reply_only():
    v, token = f.node(name="gpu-1")
    other, other_token = f.node(name="gpu-2")
    agent = APIClient()
    agent.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    reply = agent.post(f"/api/v1/nodes/{v.id}/heartbeat", {}, format="json")
    assert reply.status_code == 200, reply.json()
    key = reply.json()["telemetry_key"]
    assert key == f.key_of(v.id, token) != f.key_of(other.id, other_token)
    now = time.time()
    assert _agg(now).ingest_entry(encode(v.id, f.verify_sample(ts=now), key=key), now=now)


def test_the_agent_signs_with_the_key_it_was_given():
    """A node holds no SECRET_KEY (issue 13): its key comes from the control plane, at boot
    (the node session) and in each heartbeat reply (the latest wins)."""
    v, token = f.node(name="gpu-1")
    remote = SimpleNamespace(api_url="https://cp.example", node_id=v.id, token=token, key=None)
    remote.last_reply = None
    assert Agent.telemetry_key(remote) is None  # nothing to sign with yet
    remote.key = f.key_of(v.id, token)  # the node session's
    assert Agent.telemetry_key(remote) == f.key_of(v.id, token)
    remote.last_reply = {"telemetry_key": "k" * 64}
    assert Agent.telemetry_key(remote) == "k" * 64


def test_what_an_agent_publishes_is_taken_by_the_aggregator():
    v, token = f.node(name="gpu-1")
    agent = SimpleNamespace(node_id=v.id, last_reply=None, key=f.key_of(v.id, token))
    agent._publish_warned = False
    agent.telemetry_key = lambda: Agent.telemetry_key(agent)
    now = time.time()
    Agent.publish(agent, f.verify_sample(ts=now))
    [(_, fields)] = client().xrange(stream_of(v.id))
    agg = _agg(now)
    assert agg.ingest_entry(fields, now=now) and not agg.dropped
