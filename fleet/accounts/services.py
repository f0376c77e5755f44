"""State changes for accounts: API keys and roles."""

from __future__ import annotations

from django.contrib.auth.models import Group
from django.db import transaction
from django.utils import timezone

from fleet.accounts.access import CONTENT_GROUP, ROLE_GROUPS
from fleet.accounts.models import ApiKey
from fleet.accounts.secrets import new_secret


@transaction.atomic
def api_key_create(*, user, name: str) -> tuple[ApiKey, str]:
    """Creates a key; returns it with the plain secret, which is never stored or shown again."""
    plain, prefix, key_hash = new_secret("tdm")
    key = ApiKey.objects.create(user=user, name=name, prefix=prefix, key_hash=key_hash)
    return key, plain


def api_key_revoke(*, key: ApiKey) -> ApiKey:
    if key.revoked_at is None:
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
    return key


@transaction.atomic
def user_set_role(*, user, role: str) -> None:
    if role not in ROLE_GROUPS:
        raise ValueError(f"unknown role {role!r}; choose one of {sorted(ROLE_GROUPS)}")
    user.groups.remove(*Group.objects.filter(name__in=ROLE_GROUPS))
    user.groups.add(Group.objects.get_or_create(name=role)[0])
    user.__dict__.pop("_tandem_role", None)


@transaction.atomic
def user_set_content_access(*, user, allowed: bool) -> None:
    """Grant or withdraw reading every generation's prompt and output (the "content" group),
    independent of the user's role."""
    group = Group.objects.get_or_create(name=CONTENT_GROUP)[0]
    (user.groups.add if allowed else user.groups.remove)(group)
    user.__dict__.pop("_tandem_content", None)
