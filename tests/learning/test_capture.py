"""Captured pairs: off by default, taken only once switched on (audited), readable only by
those who may read the generation's content, purged after the retention."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from fleet.audit.models import AuditEvent
from inference.learning import services
from inference.learning.models import CapturedPair, LearningPolicy
from inference.learning.selectors import policy_of, readable
from tests.learning.conftest import finished


def test_learning_is_off_by_default_and_captures_nothing(learning, operator):
    assert policy_of(learning).enabled is False
    finished(learning, user=operator)
    from inference.learning.tick import tick

    tick(now=timezone.now() + timedelta(seconds=5))
    assert CapturedPair.objects.count() == 0


def test_switched_on_it_captures_what_finishes_afterwards_once(learning, operator, viewer):
    before = finished(learning, user=operator, at=timezone.now() - timedelta(seconds=30))
    policy = services.learning_configure(
        pipeline_id=learning.pk, actor=operator, changes={"enabled": True}, reason="try it"
    )
    event = AuditEvent.objects.get(pipeline=learning, action="learning")
    assert event.actor == operator and event.after == {"enabled": True}
    after = finished(learning, user=operator, at=timezone.now() + timedelta(seconds=1))
    later = timezone.now() + timedelta(seconds=5)
    assert services.capture(policy=policy, now=later) == 1
    assert services.capture(policy=policy, now=later + timedelta(seconds=1)) == 0  # once
    pair = CapturedPair.objects.get()
    assert pair.generation_id == after.pk and pair.user == operator
    assert pair.prompt_tokens == [1, 2, 3] and pair.output_tokens == after.output_tokens
    assert not CapturedPair.objects.filter(generation=before).exists()


def test_pairs_follow_the_generation_content_rule(learning, personas, settings):
    owner = personas["operator"]
    pair = CapturedPair.objects.create(
        pipeline=learning, user=owner, prompt_tokens=[1], output_tokens=[2]
    )
    settings.CONTENT_ROLE = "admin"
    assert readable(pair, owner) and readable(pair, personas["admin"])
    assert not readable(pair, personas["viewer"]) and not readable(pair, personas["outsider"])
    other = CapturedPair.objects.create(pipeline=learning, prompt_tokens=[1], output_tokens=[2])
    assert not readable(other, owner)  # an operator reads their own, not others'


def test_pairs_are_purged_after_the_retention(learning, operator):
    services.learning_configure(
        pipeline_id=learning.pk, actor=operator, changes={"enabled": True, "retention_hours": 2}
    )
    now = timezone.now()
    old = CapturedPair.objects.create(
        pipeline=learning, prompt_tokens=[1], output_tokens=[2], created_at=now - timedelta(hours=3)
    )
    fresh = CapturedPair.objects.create(
        pipeline=learning, prompt_tokens=[1], output_tokens=[2], created_at=now - timedelta(hours=1)
    )
    assert services.purge(now=now) == 1
    assert list(CapturedPair.objects.values_list("pk", flat=True)) == [fresh.pk]
    # switched off, the limit still holds
    services.learning_configure(pipeline_id=learning.pk, actor=operator, changes={"enabled": False})
    assert services.purge(now=now + timedelta(hours=2)) == 1
    assert not CapturedPair.objects.filter(pk__in=[old.pk, fresh.pk]).exists()


@pytest.mark.parametrize(
    "changes", [{"retention_hours": 0}, {"canary_fraction": 0.9}, {"bogus": 1}]
)
def test_bad_settings_are_refused(learning, operator, changes):
    with pytest.raises(ValidationError):
        services.learning_configure(pipeline_id=learning.pk, actor=operator, changes=changes)
    assert not LearningPolicy.objects.filter(pipeline=learning, enabled=True).exists()
