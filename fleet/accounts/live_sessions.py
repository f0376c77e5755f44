"""Live sockets end with the login session they were opened with.

A websocket authenticated by a session cookie joins that session's group; logging out sends
`session.ended` to it and the consumers close with 4401 at once. A session that ends
without a logout (it expired, or was deleted) is caught by `session_alive`, which the
consumers ask again every `RECHECK_S` while they stream.
"""

from __future__ import annotations

import hashlib
import logging
from importlib import import_module

from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, SESSION_KEY
from django.contrib.auth.signals import user_logged_out
from django.dispatch import receiver

log = logging.getLogger(__name__)

RECHECK_S = 30.0


def session_group(session_key: str) -> str:
    """The channel-layer group of one session (a digest: the key itself is a credential)."""
    return "session." + hashlib.sha256(session_key.encode()).hexdigest()[:40]


def session_alive(session_key: str | None, user_pk) -> bool:
    """Is this session still stored, unexpired, and logged in as this user?"""
    if not session_key:
        return False
    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    data = store.load()  # {} when missing or expired
    return bool(data.get(BACKEND_SESSION_KEY)) and data.get(SESSION_KEY) == str(user_pk)


@receiver(user_logged_out, dispatch_uid="tandem.close-live-sockets")
def close_live_sockets(sender, request, user, **kwargs) -> None:
    session_key = getattr(getattr(request, "session", None), "session_key", None)
    if not session_key:
        return
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    try:
        async_to_sync(get_channel_layer().group_send)(
            session_group(session_key), {"type": "session.ended"}
        )
    except Exception as exc:  # Redis down: the sockets notice at their next recheck
        log.warning("live sockets of a logged-out session not told: %r", exc)
