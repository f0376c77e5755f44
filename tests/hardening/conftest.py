"""Fixtures of the hardening tests: the API tests' model directory, pipeline and serving pair,
plus `world`, one real object behind every kind of path parameter, so bad bodies reach the
code that parses them instead of stopping at a 404."""

import pytest
from django.utils import timezone

from fleet.accounts.models import WallLink
from fleet.accounts.services import api_key_create
from fleet.nodes.models import HardwareProfile
from inference.models import Generation
from tests.serving.conftest import model_path, pipeline, place_pair, serving

__all__ = ["model_path", "pipeline", "serving"]


@pytest.fixture
def world(serving, admin):
    drafter, verifier = place_pair(serving, prefix="world")
    key, _plain = api_key_create(user=admin, name="world")
    link = WallLink.objects.create(name="wall", created_by=admin)
    generation = Generation.objects.create(
        pipeline=serving,
        user=admin,
        prompt="hi",
        prompt_tokens=[104, 105],
        params={},
        drafter=drafter,
        verifier=verifier,  # its stream lives under its verifier
    )
    return {
        "pipeline": serving,
        "node": verifier,
        "drafter": drafter,
        "profile": HardwareProfile.objects.get(slug="api-test-cpu"),
        "api_key": key,
        "wall_link": link,
        "generation": generation,
        "now": timezone.now(),
    }
