"""Health probes, unauthenticated on purpose (load balancers, compose healthchecks and
vLLM-compatible clients call them) and revealing nothing but up/down:

- `/healthz`: is the database reachable, is Redis reachable (the control plane is up);
- `/health` (GET) and `/ping` (GET, POST), the paths vLLM serves and its tools probe: the
  same, and at least one real pipeline can take a request now (a healthy drafter/verifier
  pair); 200 or 503;
- `/version`: `{"version": ...}`, as vLLM answers.
"""

from importlib.metadata import PackageNotFoundError, version

import redis
from django.conf import settings
from django.db import connection
from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_http_methods


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


def _pipeline_servable() -> bool:
    from inference.router import NoCapacity, pick_pair
    from inference.serving.request_rules import servable_pipelines

    for pipeline in servable_pipelines():
        try:
            pick_pair(pipeline)
            return True
        except NoCapacity:
            continue
    return False


def _serving_checks() -> dict[str, bool]:
    checks = {"database": _database_ok(), "redis": _redis_ok()}
    checks["pipeline"] = checks["database"] and _pipeline_servable()
    return checks


def _serving_response() -> JsonResponse:
    checks = _serving_checks()
    healthy = all(checks.values())
    return JsonResponse(
        {"status": "ok" if healthy else "unavailable", "checks": checks},
        status=200 if healthy else 503,
    )


@require_GET
def health(request):
    return _serving_response()


@csrf_exempt  # SageMaker's probe, which vLLM answers on GET and POST alike
@require_http_methods(["GET", "POST"])
def ping(request):
    return _serving_response()


def _version() -> str:
    try:
        return version("tandem")
    except PackageNotFoundError:
        return "unknown"


@require_GET
def version_view(request):
    return JsonResponse({"version": _version()})
