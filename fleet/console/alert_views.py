"""The alert list: the 11 rules of compose/prometheus/alerts.yml as Tandem evaluates them
(`fleet.telemetry.alerts`), firing first, then the pending and the recently resolved ones, then
every rule and how Tandem reads it. Any role reads it."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from fleet.accounts.principal import require
from fleet.nodes.models import Node
from fleet.pipelines.models import Pipeline
from fleet.telemetry import alert_state


@login_required
def alerts_page(request):
    require(request, "view")
    alert_state.sync()  # the page is as fresh as its load, beat or no beat
    context = alert_state.listing()
    rows = context["firing"] + context["pending"] + context["resolved"]
    # links only to what still exists (a row outlives a deleted pipeline or retired node)
    pipelines = dict(
        Pipeline.objects.filter(pk__in={r.pipeline_id for r in rows if r.pipeline_id}).values_list(
            "pk", "name"
        )
    )
    nodes = dict(
        Node.objects.filter(pk__in={r.node_id for r in rows if r.node_id}).values_list("pk", "name")
    )
    for row in rows:
        row.pipeline_name = pipelines.get(row.pipeline_id)
        row.node_name = nodes.get(row.node_id)
    return render(request, "console/alerts.html", context)
