"""Live sockets end when their user may no longer watch.

A websocket opened by a logged-in user joins that user's group (`user_group`). Whatever can
take the right away -- the user row saved (`is_active`, `password`, `is_superuser`), deleted,
a role (a group) added or removed, a group deleted -- sends `user.changed` to the groups of the
users concerned, after commit; each of their sockets then reads the user again and closes
(`verdict`): 4401 when the login no longer holds (deactivated, deleted, password changed:
Django's own session rule), 4403 when it holds but the role no longer may view. The consumers
ask `verdict` again at their periodic recheck (`live_sessions.RECHECK_S`) too, so a message
lost while Redis was away delays the close, never skips it.

Wall links (a token, no user) keep their own path: revoking one closes its screens
(`wall_links`).
"""

from __future__ import annotations

import asyncio
import logging
import threading

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction
from django.db.models.signals import m2m_changed, post_delete, post_save, pre_delete

from fleet.accounts.access import can

log = logging.getLogger(__name__)

CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
# A save that writes only other fields (`update_last_login` at every login) changes nothing
# a socket depends on: no message.
WATCHED_FIELDS = frozenset({"password", "is_active", "is_superuser"})


def user_group(user_pk) -> str:
    return f"user-{int(user_pk)}"


def verdict(user_pk, auth_hash: str, action: str = "view") -> tuple[int | None, object]:
    """(None, the user read afresh) while this user, logged in with a password whose session
    hash is `auth_hash`, may still `action`; else (the close code, None)."""
    user = get_user_model().objects.filter(pk=user_pk).first()
    if user is None or not user.is_active or user.get_session_auth_hash() != auth_hash:
        return CLOSE_UNAUTHENTICATED, None
    if not can(user, action):
        return CLOSE_FORBIDDEN, None
    return None, user


def notify(user_pks) -> None:
    """After commit: tell these users' live sockets to check again (best effort: the
    periodic recheck catches what a Redis outage loses)."""
    pks = sorted({int(pk) for pk in user_pks})
    if not pks:
        return

    def send() -> None:
        from asgiref.sync import async_to_sync
        from channels.layers import get_channel_layer

        layer = get_channel_layer()
        try:
            for pk in pks:
                async_to_sync(layer.group_send)(user_group(pk), {"type": "user.changed"})
        except Exception as exc:
            log.warning("live sockets of users %s not told of a change: %r", pks, exc)

    def send_from_sync_context() -> None:
        try:  # a sync caller inside an event loop's thread (an async view): another thread
            asyncio.get_running_loop()
        except RuntimeError:
            send()
            return
        worker = threading.Thread(target=send, name="user-changed")
        worker.start()
        worker.join(timeout=5)

    transaction.on_commit(send_from_sync_context)


def _user_saved(sender, instance, created, update_fields=None, **kwargs) -> None:
    if created or (update_fields is not None and not WATCHED_FIELDS & set(update_fields)):
        return
    notify([instance.pk])


def _user_deleted(sender, instance, **kwargs) -> None:
    notify([instance.pk])


def _roles_changed(sender, instance, action, reverse, pk_set, **kwargs) -> None:
    """user.groups.add/remove/clear/set (forward) or group.user_set.... (reverse)."""
    if not reverse:
        if action in ("post_add", "post_remove", "post_clear"):
            notify([instance.pk])
    elif action in ("post_add", "post_remove"):
        notify(pk_set or ())
    elif action == "pre_clear":  # the members are gone by post_clear
        notify(instance.user_set.values_list("pk", flat=True))


def _group_deleted(sender, instance, **kwargs) -> None:
    notify(instance.user_set.values_list("pk", flat=True))


def connect() -> None:
    """Connect the receivers (AccountsConfig.ready)."""
    user = get_user_model()
    post_save.connect(_user_saved, sender=user, dispatch_uid="tandem.live-users.saved")
    post_delete.connect(_user_deleted, sender=user, dispatch_uid="tandem.live-users.deleted")
    m2m_changed.connect(
        _roles_changed, sender=user.groups.through, dispatch_uid="tandem.live-users.roles"
    )
    pre_delete.connect(_group_deleted, sender=Group, dispatch_uid="tandem.live-users.group")
