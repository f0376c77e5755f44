"""Fixtures of the pipeline tests: pipelines, online nodes placed in them."""

from __future__ import annotations

import pytest

from tests.factories import make_pipeline, online_node, place

__all__ = ["make_pipeline", "online_node", "place"]  # imported from here too


@pytest.fixture
def pipeline(db):
    """A pipeline with one online GPU verifier and one online SRAM drafter."""
    p = make_pipeline(name="main")
    place(p, online_node(name="gpu-v1"), "verify")
    place(p, online_node(name="sram-d1", profile="d-matrix-corsair", roles=("draft",)), "draft")
    return p
