"""The one permission policy. REST views, pages and websocket consumers all ask `can()`.

Roles are Django groups: viewer < operator < admin (superusers are admins). Actions:
- "view":       read pages, API lists, live telemetry, the wall
- "operate":    change pipelines, drain/return/move nodes, cancel generations
- "administer": the registry itself: register/retire nodes, tokens, profiles, API keys
- "generate":   send inference requests (operators and admins; viewers only watch)
Per-object actions on a generation (`obj` is the Generation):
- "read_content": its prompt and output text. The owner, users with the role named by
  TANDEM_CONTENT_ROLE (default admin), and users in the "content" group (a grant given
  per user in /admin/, on top of any role). Everyone else with "view" sees its metadata and
  figures only.
- "cancel":     its owner (who could create it: "generate"), or an admin.
"""

from __future__ import annotations

from enum import IntEnum


class Role(IntEnum):
    NONE = 0
    VIEWER = 1
    OPERATOR = 2
    ADMIN = 3


ROLE_GROUPS = {"viewer": Role.VIEWER, "operator": Role.OPERATOR, "admin": Role.ADMIN}
CONTENT_GROUP = "content"  # read every generation's text, whatever the role

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


def remember_groups(user, names) -> None:
    """Fill what `role_of` and `in_content_group` would each query, from the user's group
    names read together with its credentials (one query, not two per request)."""
    names = set(names)
    user._tandem_role = max((ROLE_GROUPS[n] for n in names if n in ROLE_GROUPS), default=Role.NONE)
    user._tandem_content = CONTENT_GROUP in names


def content_role() -> Role:
    from django.conf import settings

    return ROLE_GROUPS[settings.CONTENT_ROLE]


def in_content_group(user) -> bool:
    cached = getattr(user, "_tandem_content", None)
    if cached is None:
        cached = user.groups.filter(name=CONTENT_GROUP).exists()
        user._tandem_content = cached
    return cached


def _owns(user, obj) -> bool:
    owner_id = getattr(obj, "user_id", None)
    return owner_id is not None and owner_id == getattr(user, "pk", None)


def can(user, action: str, obj=None) -> bool:
    """May `user` perform `action` (on `obj`)? Role actions ignore `obj`; the generation
    actions ("read_content", "cancel") need it."""
    if action == "read_content":
        role = role_of(user)
        if role < Role.VIEWER:
            return False
        return role >= content_role() or _owns(user, obj) or in_content_group(user)
    if action == "cancel":
        role = role_of(user)
        return role >= Role.ADMIN or (role >= Role.OPERATOR and _owns(user, obj))
    try:
        needed = ACTION_ROLE[action]
    except KeyError as exc:
        raise ValueError(f"unknown action {action!r}") from exc
    return role_of(user) >= needed
