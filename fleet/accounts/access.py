"""The one permission policy. REST views, pages and websocket consumers all ask `can()`.

Roles are Django groups: viewer < operator < admin (superusers are admins). Actions:
- "view":       read pages, API lists, live telemetry, the wall
- "operate":    change pipelines, drain/return/move nodes, cancel generations
- "administer": the registry itself: register/retire nodes, tokens, profiles, API keys
- "generate":   send inference requests (operators and admins; viewers only watch)
"""

from __future__ import annotations

from enum import IntEnum


class Role(IntEnum):
    NONE = 0
    VIEWER = 1
    OPERATOR = 2
    ADMIN = 3


ROLE_GROUPS = {"viewer": Role.VIEWER, "operator": Role.OPERATOR, "admin": Role.ADMIN}

ACTION_ROLE = {
    "view": Role.VIEWER,
    "generate": Role.OPERATOR,
    "operate": Role.OPERATOR,
    "administer": Role.ADMIN,
}


def role_of(user) -> Role:
    """The highest role of a user; NONE for anonymous users and non-user principals."""
    if user is None or not getattr(user, "is_authenticated", False):
        return Role.NONE
    if not hasattr(user, "groups"):  # e.g. a node agent's principal: never a console role
        return Role.NONE
    if getattr(user, "is_superuser", False):
        return Role.ADMIN
    cached = getattr(user, "_tandem_role", None)
    if cached is None:
        names = set(user.groups.values_list("name", flat=True))
        cached = max((ROLE_GROUPS[n] for n in names if n in ROLE_GROUPS), default=Role.NONE)
        user._tandem_role = cached
    return cached


def can(user, action: str, obj=None) -> bool:
    """May `user` perform `action` (on `obj`)? Objects carry no extra rules yet; the
    parameter is here so per-object rules (e.g. a wall link scoped to one pipeline) have
    one place to live."""
    try:
        needed = ACTION_ROLE[action]
    except KeyError as exc:
        raise ValueError(f"unknown action {action!r}") from exc
    return role_of(user) >= needed
