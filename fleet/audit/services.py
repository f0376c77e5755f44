"""The audit log's one door: `audit()` (keyword-only, in the caller's transaction; the
change's signal after commit)."""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

from django.db import transaction

from fleet.audit import signals
from fleet.audit.models import AuditEvent

logger = logging.getLogger(__name__)


def _committed(event: AuditEvent) -> None:
    for receiver, result in signals.change_committed.send_robust(sender=AuditEvent, event=event):
        if isinstance(result, Exception):
            logger.warning("change_committed receiver %r failed: %r", receiver, result)


def actor_of(actor) -> tuple[Any, str]:
    """(the user or None, the label): a user, a label string for automation, or None."""
    if actor is None:
        return None, "system"
    if isinstance(actor, str):
        return None, actor
    return actor, actor.get_username()


def audit(
    *, actor, action: str, pipeline=None, node=None, before=None, after=None, reason="", at=None
):
    """One audit event (`at`: its time, for events that are one change seen from two
    pipelines, such as a move); its chart marker goes to the open pages after commit."""
    user, label = actor_of(actor)
    event = AuditEvent.objects.create(
        actor=user,
        actor_label=label,
        action=action,
        pipeline=pipeline,
        node=node,
        before=before or {},
        after=after or {},
        reason=reason or "",
        **({"created_at": at} if at is not None else {}),
    )
    if pipeline is not None or node is not None:
        transaction.on_commit(partial(_committed, event))  # its marker, on the open pages
    return event
