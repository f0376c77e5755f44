"""Wall links: signed, revocable grants that let an unattended screen show the monitoring
wall (page and websocket) and nothing else. Create, revoke, and read a token.

A wall link's token travels only where access logs do not see it: the link is
`/wall/screen/#token=...` (a URL fragment never reaches the server), the screen's page sends
it in the `X-Wall-Token` header and its websocket in the `Sec-WebSocket-Protocol` header
(`WALL_TOKEN_PROTOCOL` + the token with `:` written as `.`, since a protocol name may not
hold a colon). Never in a path or query string, which daphne and proxies log."""

from __future__ import annotations

from django.core import signing
from django.core.exceptions import ValidationError
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from fleet.accounts.models import WallLink
from fleet.audit.services import audit

WALL_SALT = "tandem.wall-link"
WALL_PROTOCOL = "tandem.wall"
WALL_TOKEN_PROTOCOL = "tandem.wall-token."


def wall_link_url(request, token: str) -> str:
    """The link to open on a screen: the token in the fragment, out of every log."""
    return request.build_absolute_uri(reverse("console:wall-screen")) + f"#token={token}"


def wall_protocols(token: str) -> list[str]:
    """The subprotocols a screen offers to open the wall with `token` (as static/js/wall.js)."""
    return [WALL_PROTOCOL, WALL_TOKEN_PROTOCOL + token.replace(":", ".")]


def token_from_protocols(protocols) -> str | None:
    """The wall token a websocket offered as a subprotocol, or None."""
    for protocol in protocols or ():
        if isinstance(protocol, str) and protocol.startswith(WALL_TOKEN_PROTOCOL):
            return protocol[len(WALL_TOKEN_PROTOCOL) :].replace(".", ":")
    return None


def wall_token(link: WallLink) -> str:
    return signing.dumps({"wall": link.pk}, salt=WALL_SALT, compress=False)


def wall_link_for_token(token: str | None) -> WallLink | None:
    """The usable link a token names, or None (bad signature, unknown, revoked or expired
    link)."""
    link_id = _link_id(token)
    if link_id is None:
        return None
    link = WallLink.objects.usable().filter(pk=link_id).first()
    if link is not None:
        now = timezone.now()
        if link.last_used_at is None or (now - link.last_used_at).total_seconds() > 60:
            WallLink.objects.filter(pk=link.pk).update(last_used_at=now)
    return link


def _link_id(token: str | None) -> int | None:
    """The link id a well-signed token names, else None."""
    if not token or len(token) > 200:
        return None
    try:
        data = signing.loads(token, salt=WALL_SALT)
    except signing.BadSignature:
        return None
    link_id = data.get("wall") if isinstance(data, dict) else None
    return link_id if isinstance(link_id, int) and not isinstance(link_id, bool) else None


def wall_link_refusal(token: str | None) -> str:
    """What a screen whose token opens nothing says (final: the link will not come back)."""
    link_id = _link_id(token)
    link = WallLink.objects.filter(pk=link_id).first() if link_id is not None else None
    if link is None:
        return "This wall link is not valid."
    if link.revoked_at is not None:
        return f"This wall link (“{link.name}”) was revoked."
    if link.expired:
        when = timezone.localtime(link.expires_at).strftime("%Y-%m-%d %H:%M")
        return f"This wall link (“{link.name}”) expired at {when}."
    return "This wall link is not valid."


@transaction.atomic
def wall_link_create(*, name: str, actor, expires_at=None) -> tuple[WallLink, str]:
    if expires_at is not None and expires_at <= timezone.now():
        raise ValidationError({"expires_at": "must be in the future"})
    link = WallLink.objects.create(name=name.strip()[:100], created_by=actor, expires_at=expires_at)
    audit(
        actor=actor,
        action="wall_link.create",
        after={
            "wall_link": link.pk,
            "name": link.name,
            "expires_at": expires_at.isoformat() if expires_at else None,
        },
    )
    return link, wall_token(link)


@transaction.atomic
def wall_link_revoke(*, link: WallLink, actor) -> WallLink:
    link = WallLink.objects.select_for_update().get(pk=link.pk)
    if link.revoked_at is None:
        link.revoked_at = timezone.now()
        link.save(update_fields=["revoked_at"])
        audit(
            actor=actor,
            action="wall_link.revoke",
            before={"wall_link": link.pk, "name": link.name},
        )
        transaction.on_commit(lambda: _close_screens(link.pk))
    return link


def wall_link_group(link_id: int) -> str:
    """The channel-layer group of the screens opened with one link (told to close when it
    is revoked)."""
    return f"walllink-{int(link_id)}"


def _close_screens(link_id: int) -> None:
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    try:
        async_to_sync(get_channel_layer().group_send)(
            wall_link_group(link_id), {"type": "wall.revoked"}
        )
    except Exception:  # Redis down: the screens lose access at their next reconnect
        pass
