"""A generation's page: the path it took (`inference.timeline`), for "why was it slow"."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, render

from fleet.accounts.principal import require
from fleet.nodes.models import Node
from inference.models import Generation
from inference.timeline import may_see, timeline

STRIP_W, STRIP_H = 960, 120  # the rounds strip (SVG user units)
LABELS = {
    "queued": "Queued",
    "rerouted": "Re-routed",
    "degraded": "Drafter lost",
    "claimed": "Claimed",
    "prefill": "Prefill",
    "first_token": "First token",
    "finished": "Finished",
    "failed": "Failed",
    "cancelled": "Cancelled",
}
ROWS_SHOWN = 500


def rounds_strip(rounds: list[dict], span_ms: float) -> list[dict]:
    """Each round as two bars at its time: k drafted (light) over accepted (dark)."""
    if not rounds or span_ms <= 0:
        return []
    k_max = max(max(int(r["k"]) for r in rounds), 1)
    width = max(1.0, min(8.0, STRIP_W / len(rounds) * 0.8))
    bars = []
    for r in rounds:
        x = round(r["at_ms"] / span_ms * (STRIP_W - width), 2)
        k_h = round(int(r["k"]) / k_max * STRIP_H, 2)
        acc_h = round(int(r["accepted"]) / k_max * STRIP_H, 2)
        bars.append(
            {
                "x": x,
                "w": width,
                "k_y": round(STRIP_H - k_h, 2),
                "k_h": k_h,
                "acc_y": round(STRIP_H - acc_h, 2),
                "acc_h": acc_h,
                "title": f"{r['at_ms']:.0f} ms: k {r['k']}, accepted {r['accepted']}, "
                f"batch {r['batch']}, verify {r['verify_ms']:.1f} ms",
            }
        )
    return bars


@login_required
def generation_page(request, pk):
    generation = get_object_or_404(
        Generation.objects.select_related("pipeline", "drafter", "verifier"), pk=pk
    )
    require(request, "view", generation.pipeline)
    if not may_see(request.user, generation):
        raise PermissionDenied("Only operators or who may read this generation see its path.")
    t = timeline(generation)
    ids = {e.get(r) for e in t["events"] for r in ("drafter", "verifier")} - {None}
    names = dict(Node.objects.filter(pk__in=ids).values_list("pk", "name"))
    for e in t["events"]:
        e["label"] = LABELS.get(e["kind"], e["kind"])
        for role in ("drafter", "verifier"):
            if e.get(role) is not None:
                e[f"{role}_name"] = names.get(e[role], f"node {e[role]} (gone)")
    end = t["summary"]["total_ms"] or max(
        [e["at_ms"] or 0 for e in t["events"]] + [r["at_ms"] for r in t["rounds"]] + [1.0]
    )
    context = {
        "generation": generation,
        "t": t,
        "strip": rounds_strip(t["rounds"], end),
        "strip_w": STRIP_W,
        "strip_h": STRIP_H,
        "span_ms": end,
        "rounds_shown": t["rounds"][:ROWS_SHOWN],
    }
    return render(request, "console/generation.html", context)
