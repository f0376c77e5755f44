"""Console pages. Thin: read, render. Every page requires a login."""

from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from fleet.accounts.access import can
from fleet.telemetry import alert_state, snapshot

SECTIONS = [
    (
        "Fleet",
        "/nodes/",
        "Register drafter and verifier nodes, watch liveness and hand out tokens.",
    ),
    (
        "Pipelines",
        "/pipelines/",
        "Pair a target with its drafts, set k and batch caps, rebalance live.",
    ),
    ("Wall", "/wall/", "The read-only monitoring wall: acceptance, goodput and power at a glance."),
    (
        "Planner",
        "/planner/",
        "Predict tokens/s, latency and tokens per joule before you change a thing.",
    ),
    ("API", "/api/v1/docs/", "The REST admin API and its OpenAPI schema, for automation."),
]


@login_required
def home(request):
    context = {"sections": SECTIONS, "can_view": can(request.user, "view")}
    if context["can_view"]:  # the live overview (telemetry): viewers and up
        context["live"] = snapshot.read_fleet()
        context["warming"] = _warming()
        context["dead_letters"] = _dead_letters()
        context["alerts_firing"] = len(alert_state.sync())
    return render(request, "console/home.html", context)


def _dead_letters() -> dict | None:
    """The ledger's dead letters (count, the last few), for the notice on this page."""
    from inference.ledger_report import summary

    return summary()


def _warming() -> list:
    """(pipeline, warm-up) of the real pipelines still preparing their models."""
    from fleet.pipelines.models import Pipeline
    from inference.serving.readiness import warming_up

    pipelines = list(Pipeline.objects.filter(simulated=False).order_by("name"))
    found = warming_up(pipelines)
    return [(p, found[p.pk]) for p in pipelines if p.pk in found]
