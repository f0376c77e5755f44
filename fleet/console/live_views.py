"""Live console pages: fleet, pipeline, node, the monitoring wall and its links.

Each page renders its current state on the server (DB + the aggregator's Redis snapshot +
rollups for the charts), then `static/js/*.js` keeps it live over the websocket.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from fleet.accounts.access import can
from fleet.console import selectors
from fleet.console.models import WallLink
from fleet.console.services import wall_link_create, wall_link_for_token, wall_link_revoke
from fleet.nodes.choices import NodeState
from fleet.nodes.models import Node
from fleet.pipelines.models import Pipeline
from fleet.telemetry import rollups, snapshot


def _require(request, action: str, obj=None) -> None:
    if not can(request.user, action, obj):
        raise PermissionDenied


@login_required
def fleet_page(request):
    _require(request, "view")
    context = selectors.fleet_context()
    context["filters"] = {
        "state": request.GET.get("state", ""),
        "role": request.GET.get("role", ""),
        "pipeline": request.GET.get("pipeline", ""),
        "q": request.GET.get("q", "")[:60],
    }
    context["states"] = NodeState.values
    return render(request, "console/fleet.html", context)


@login_required
def pipeline_page(request, pk: int):
    pipeline = get_object_or_404(Pipeline, pk=pk)
    _require(request, "view", pipeline)
    context = {
        "pipeline": pipeline,
        "live": snapshot.read_pipeline(pipeline.pk),
        "series": rollups.series("pipeline", pipeline.pk, minutes=30),
        "placements": pipeline.placements.select_related("node", "node__profile").order_by(
            "role", "node__name"
        ),
        "can_operate": can(request.user, "operate", pipeline),
        "warmup": _warmup_of(pipeline),
    }
    if context["can_operate"]:
        from fleet.pipelines.views import actions_context  # the planner's controls

        context.update(actions_context(pipeline))
    return render(request, "console/pipeline.html", context)


@login_required
def node_page(request, pk: int):
    node = get_object_or_404(Node.objects.select_related("profile"), pk=pk)
    _require(request, "view", node)
    context = {
        "node": node,
        "placement": _placement(node),
        "live": snapshot.read_node(node.pk),
        "series": rollups.series("node", node.pk, minutes=30),
        "generations": selectors.generations_of(node)[:20],
    }
    return render(request, "console/node.html", context)


def _placement(node: Node):
    try:
        return node.placement
    except Node.placement.RelatedObjectDoesNotExist:
        return None


def wall_page(request):
    """The wall: with a valid `?token=` for anyone (read-only, this page only); else a
    logged-in viewer."""
    token = request.GET.get("token", "")
    if token:
        if wall_link_for_token(token) is None:
            return render(request, "console/wall_denied.html", status=403)
    elif not request.user.is_authenticated:
        return redirect(f"{reverse('login')}?next={request.path}")
    else:
        _require(request, "view")
    live = snapshot.read_fleet()
    context = {
        "token": token,
        "live": live,
        "wall_data": {
            "token": token,
            "live": live,
            "fleet_series": rollups.series("fleet", 0, minutes=30),
            "pipeline_series": {
                str(p.pk): rollups.series("pipeline", p.pk, minutes=30)
                for p in Pipeline.objects.only("id")[:24]
            },
        },
    }
    response = render(request, "console/wall.html", context)
    response["Referrer-Policy"] = "no-referrer"  # keep the token out of Referer headers
    return response


@login_required
@require_http_methods(["GET", "POST"])
def wall_links_page(request):
    _require(request, "administer")
    created_token = None
    if request.method == "POST":
        name = request.POST.get("name", "").strip()
        if not name:
            messages.error(request, "Give the link a name: where is the screen?")
        else:
            link, created_token = wall_link_create(name=name, actor=request.user)
            messages.success(request, f"Wall link “{link.name}” created. Copy it now.")
    links = WallLink.objects.select_related("created_by")[:200]
    wall_url = None
    if created_token:
        wall_url = request.build_absolute_uri(f"{reverse('console:wall')}?token={created_token}")
    return render(request, "console/wall_links.html", {"links": links, "wall_url": wall_url})


@login_required
@require_POST
def wall_link_revoke_view(request, pk: int):
    _require(request, "administer")
    link = get_object_or_404(WallLink, pk=pk)
    wall_link_revoke(link=link, actor=request.user)
    messages.success(request, f"Wall link “{link.name}” revoked; its screens were disconnected.")
    return redirect("console:wall-links")


def _warmup_of(pipeline):
    from inference.readiness import warming_up

    return warming_up([pipeline]).get(pipeline.pk)
