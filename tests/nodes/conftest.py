"""Fixtures of the node registry tests: nodes, their agents (the node-agent persona)."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from tests.factories import make_node

__all__ = ["agent_client", "make_node"]  # make_node: imported from here too


def agent_client(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


@pytest.fixture
def node_and_token(db):
    return make_node(name="verify-01", labels={"zone": "eu-west"})


@pytest.fixture
def node(node_and_token):
    return node_and_token[0]


@pytest.fixture
def agent(node_and_token):
    """The node-agent persona: an API client holding `node`'s token."""
    return agent_client(node_and_token[1])


GOOD_TELEMETRY = {
    "interval_s": 1.0,
    "num_drafts": 10,
    "num_draft_tokens": 40,
    "num_accepted_tokens": 25,
    "num_accepted_tokens_per_pos": [9, 7, 5, 4],
    "verify_batch_size_hist": {"8": 3, "16": 1},
    "draft_step_s": 0.004,
    "verify_step_s": 0.021,
    "tokens_generated": 35,
    "queue_depth": 2,
    "power_w": 412.5,
    "power_source": "measured-nvml",
    "energy_j": 412.5,
    "utilization": 0.73,
}
