"""`/healthz`: is the database reachable, is Redis reachable. Unauthenticated on purpose
(load balancers and compose healthchecks call it) and reveals nothing but up/down."""

import redis
from django.conf import settings
from django.db import connection
from django.http import JsonResponse
from django.views.decorators.http import require_GET


def _database_ok() -> bool:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            return cursor.fetchone() == (1,)
    except Exception:  # any driver error means "down"
        return False


def _redis_ok() -> bool:
    if not settings.REDIS_URL:
        return False
    try:
        return bool(redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=1).ping())
    except redis.RedisError:
        return False


@require_GET
def healthz(request):
    checks = {"database": _database_ok(), "redis": _redis_ok()}
    healthy = all(checks.values())
    return JsonResponse(
        {"status": "ok" if healthy else "degraded", "checks": checks},
        status=200 if healthy else 503,
    )
