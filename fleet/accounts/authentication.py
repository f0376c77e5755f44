"""DRF authentication by API key: `Authorization: Bearer tdm_<prefix>_<secret>`."""

from __future__ import annotations

from datetime import UTC

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connections
from django.utils import timezone
from rest_framework import authentication, exceptions

from fleet.accounts import key_throttle
from fleet.accounts.access import remember_groups
from fleet.accounts.models import ApiKey
from fleet.accounts.secrets import digest, same, split_prefix
from fleet.raw_models import raw_instances


def bearer_token(request) -> str | None:
    header = authentication.get_authorization_header(request).decode(errors="replace")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def user_for_api_key(plain: str):
    """The user owning an active key, or None. Also used by the OpenAI endpoints.

    On the path of every API request: raw SQL, two short queries (the key with its user, the
    user's group names, which `access.can` then needs no query for); the ORM spent more CPU
    compiling these queries than the database spent running them."""
    prefix = split_prefix(plain, "tdm")
    if prefix is None:
        return None
    user = _key_owner(prefix)
    if user is None or user.key_revoked_at is not None:
        return None
    if not same(digest(plain), user.key_hash):
        return None
    if not user.is_active:
        return None
    now = timezone.now()
    last = user.key_last_used_at
    if last is None or (now - _aware(last)).total_seconds() > 60:
        ApiKey.objects.filter(pk=user.key_id).update(last_used_at=now)
    remember_groups(user, _group_names(user.pk))
    return user


def _key_owner(prefix: str):
    """The user of the key with this prefix, annotated with the key's id, hash, revocation
    and last use; None if no key has it."""
    User = get_user_model()
    sql = (
        f"SELECT u.*, k.id AS key_id, k.key_hash AS key_hash, k.revoked_at AS key_revoked_at, "
        f"k.last_used_at AS key_last_used_at FROM {User._meta.db_table} u "
        f"JOIN {ApiKey._meta.db_table} k ON k.user_id = u.{User._meta.pk.column} "
        "WHERE k.prefix = %s"
    )
    rows = raw_instances(User, sql, [prefix])
    if not rows:
        return None
    user = rows[0]
    # raw() leaves extra columns unconverted (SQLite gives text for datetimes)
    field = ApiKey._meta.get_field("revoked_at")
    conn = connections[User.objects.db]
    for name in ("key_revoked_at", "key_last_used_at"):
        value = getattr(user, name)
        for converter in conn.ops.get_db_converters(field.get_col(ApiKey._meta.db_table)):
            value = converter(value, field, conn)
        setattr(user, name, value)
    return user


def _group_names(user_id) -> list[str]:
    User = get_user_model()
    through = User.groups.through._meta
    group = Group._meta.db_table
    sql = (
        f"SELECT g.name FROM {group} g JOIN {through.db_table} ug ON ug.group_id = g.id "
        "WHERE ug.user_id = %s"
    )
    with connections[User.objects.db].cursor() as cursor:
        cursor.execute(sql, [user_id])
        return [row[0] for row in cursor.fetchall()]


def _aware(value):
    return value if timezone.is_aware(value) else timezone.make_aware(value, UTC)


def user_for_request_key(request, plain: str):
    """`user_for_api_key` behind the lockout of the request's address: a wrong key counts one
    failure, and raises `key_throttle.KeyAuthLocked` once the address is locked out. A valid
    key always works: keys are 256-bit random (a lockout cannot make guessing any harder), and
    refusing them would let anyone behind the same NAT or proxy lock every client out.
    Every API-key login over HTTP (REST, SSE, /v1) goes through here."""
    user = user_for_api_key(plain)
    if user is not None:
        return user
    address = key_throttle.client_address(request)
    key_throttle.check(address)
    key_throttle.record_failure(address)
    return None


class ApiKeyAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        token = bearer_token(request)
        if token is None or not token.startswith("tdm_"):
            return None  # not ours: node tokens (tdn_) are handled by the nodes app
        try:
            user = user_for_request_key(request, token)
        except key_throttle.KeyAuthLocked as exc:
            raise exceptions.Throttled(wait=exc.retry_after, detail=str(exc)) from exc
        if user is None:
            raise exceptions.AuthenticationFailed("Invalid or revoked API key.")
        return (user, token)

    def authenticate_header(self, request) -> str:
        return self.keyword
