"""Live console pages: fleet, pipeline, node, the monitoring wall and its links.

Each page renders its current state on the server (DB + the aggregator's Redis snapshot +
rollups for the charts), then `static/js/*.js` keeps it live over the websocket.
"""

from __future__ import annotations

from datetime import timedelta

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import redirect_to_login
from django.http import JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from fleet.accounts.access import can
from fleet.accounts.models import WallLink
from fleet.accounts.principal import require
from fleet.accounts.wall_links import (
    wall_link_create,
    wall_link_for_token,
    wall_link_refusal,
    wall_link_revoke,
    wall_link_url,
)
from fleet.console import selectors
from fleet.console.pipeline_views import actions_context  # the operators' controls
from fleet.nodes.choices import NodeState
from fleet.nodes.models import Node
from fleet.nodes.selectors import node_tokens
from fleet.pipelines.models import Pipeline
from fleet.telemetry import payloads, rollups, snapshot

DEFAULT_RANGE = "1h"  # the charts' time range when a page opens


def _range_of(request) -> str:
    """The time range a link asks for (?range=24h: a view kept in its URL), else the default."""
    asked = request.GET.get("range", "")
    return asked if asked in selectors.RANGES else DEFAULT_RANGE


@login_required
def fleet_page(request):
    require(request, "view")
    filters = {
        "state": request.GET.get("state", ""),
        "role": request.GET.get("role", ""),
        "pipeline": request.GET.get("pipeline", ""),
        "sim": request.GET.get("sim", ""),
        "q": request.GET.get("q", "")[:60],
    }
    context = selectors.fleet_context(
        {k: v for k, v in filters.items() if v},
        sort=request.GET.get("sort", "name"),
        desc=request.GET.get("dir") == "desc",
    )
    context["filters"] = filters
    context["states"] = NodeState.values
    return render(request, "console/fleet.html", context)


@login_required
def pipeline_page(request, pk: int):
    pipeline = get_object_or_404(Pipeline, pk=pk)
    require(request, "view", pipeline)
    context = {
        "pipeline": pipeline,
        "live": snapshot.read_pipeline(pipeline.pk),
        "history": selectors.history("pipeline", pipeline, _range_of(request)),
        "ranges": list(selectors.RANGES),
        **_placements_shown(pipeline),
        "can_operate": can(request.user, "operate", pipeline),
        "warmup": _warmup_of(pipeline),
    }
    if context["can_operate"]:
        from fleet.pipelines import selectors as pipeline_selectors

        context.update(actions_context(pipeline))
        context["revisions"] = pipeline_selectors.revisions(pipeline=pipeline)[:50]
        context["events"] = pipeline_selectors.audit_events(pipeline=pipeline)[:50]
        context["generations"] = selectors.recent_generations(pipeline)
    return render(request, "console/pipeline.html", context)


@login_required
def node_page(request, pk: int):
    node = get_object_or_404(Node.objects.select_related("profile"), pk=pk)
    require(request, "view", node)
    context = {
        "node": node,
        "placement": _placement(node),
        "live": snapshot.read_node(node.pk),
        "history": selectors.history("node", node, _range_of(request)),
        "ranges": list(selectors.RANGES),
        "generations": selectors.generations_of(node)[:20],
        "tokens": node_tokens(node=node) if can(request.user, "administer") else None,
    }
    return render(request, "console/node.html", context)


def _placements_shown(pipeline: Pipeline) -> dict:
    """The placements the page lists (`payloads.shown_per_role`: the nodes its live
    `pipeline.update` carries) and how many there are per role."""
    every = list(pipeline.placements.values_list("pk", "role", "node__name"))
    shown = [pk for pk, _, _ in payloads.shown_per_role(every, lambda t: t[1], lambda t: t[2])]
    by_pk = pipeline.placements.select_related("node", "node__profile").in_bulk(shown)
    counts = {"draft": 0, "verify": 0}
    for _, role, _ in every:
        counts[role] = counts.get(role, 0) + 1
    return {
        "placements": [by_pk[pk] for pk in shown],
        "placement_counts": counts,
        "rows_per_role": payloads.PIPELINE_ROWS_PER_ROLE,
    }


def _placement(node: Node):
    try:
        return node.placement
    except Node.placement.RelatedObjectDoesNotExist:
        return None


def _wall_data(token: str = "") -> dict:
    live = snapshot.read_fleet()
    return {
        "live": live,
        # real nodes drawn, simulated ones apart under "simulated_*" (never mixed in a line)
        "fleet_series": rollups.fleet_series(minutes=30),
        "pipeline_series": {
            str(p.pk): rollups.series("pipeline", p.pk, minutes=30)
            for p in Pipeline.objects.only("id")[:24]
        },
    }


def _no_referrer(response):
    response["Referrer-Policy"] = "no-referrer"
    response["Cache-Control"] = "no-store"
    return response


def wall_page(request):
    """The wall for a logged-in viewer. An old link with `?token=` is sent on to the screen
    page with the token in the fragment, so later loads keep it out of the access log."""
    token = request.GET.get("token", "")
    if token:
        return _no_referrer(redirect(wall_link_url(request, token)))
    if not request.user.is_authenticated:
        return redirect_to_login(request.get_full_path())
    require(request, "view")
    data = _wall_data()
    response = render(request, "console/wall.html", {"live": data["live"], "wall_data": data})
    return _no_referrer(response)


def wall_screen(request):
    """The wall for a screen opened with a wall link (`/wall/screen/#token=...`). The page
    carries no data and needs no login: its script reads the token from the fragment, loads
    the figures from `wall/data` (token in a header) and follows the websocket."""
    context = {"live": None, "wall_data": {"screen": True}, "screen": True}
    return _no_referrer(render(request, "console/wall.html", context))


@require_http_methods(["GET"])
def wall_data(request):
    """The wall's figures as JSON: for a wall link's `X-Wall-Token` header, or a viewer."""
    token = request.headers.get("X-Wall-Token", "")
    if token:
        if wall_link_for_token(token) is None:  # final: the screen says why, for good
            detail = wall_link_refusal(token)
            return _no_referrer(JsonResponse({"detail": detail}, status=403))
    elif not request.user.is_authenticated:
        return JsonResponse({"detail": "Authentication credentials were not provided."}, status=401)
    elif not can(request.user, "view"):
        return JsonResponse({"detail": "You may not view the wall."}, status=403)
    return _no_referrer(JsonResponse(_wall_data()))


@login_required
@require_http_methods(["GET", "POST"])
def wall_links_page(request):
    require(request, "administer")
    created_token = None
    if request.method == "POST":
        name = request.POST.get("name", "").strip()
        expires = request.POST.get("expires", "")
        if not name:
            messages.error(request, "Give the link a name: where is the screen?")
        elif expires not in LINK_LIFETIMES:
            messages.error(request, "Choose when the link expires.")
        else:
            lifetime = LINK_LIFETIMES[expires]
            expires_at = timezone.now() + lifetime if lifetime else None
            link, created_token = wall_link_create(
                name=name, actor=request.user, expires_at=expires_at
            )
            messages.success(request, f"Wall link “{link.name}” created. Copy it now.")
    links = WallLink.objects.select_related("created_by")[:200]
    wall_url = wall_link_url(request, created_token) if created_token else None
    context = {"links": links, "wall_url": wall_url, "lifetimes": LINK_LIFETIMES}
    return render(request, "console/wall_links.html", context)


# The wall-links page's choices of lifetime ("" = never expires).
LINK_LIFETIMES = {
    "": None,
    "1h": timedelta(hours=1),
    "1d": timedelta(days=1),
    "7d": timedelta(days=7),
    "30d": timedelta(days=30),
}


@login_required
@require_POST
def wall_link_revoke_view(request, pk: int):
    require(request, "administer")
    link = get_object_or_404(WallLink, pk=pk)
    wall_link_revoke(link=link, actor=request.user)
    messages.success(request, f"Wall link “{link.name}” revoked; its screens were disconnected.")
    return redirect("console:wall-links")


def _warmup_of(pipeline):
    from inference.serving.readiness import warming_up

    return warming_up([pipeline]).get(pipeline.pk)
