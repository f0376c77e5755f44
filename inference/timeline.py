"""A generation's timeline: the path one request took, from what the ledger holds.

Queued (created) -> routed to a pair -> re-routes and degrades of earlier attempts (noted by
the control plane on the row) -> the last attempt: claimed by its verifier (`started_at`),
prefill, first token, each verify round (k drafted, accepted, the batch it shared, the
round's forward time: the verifier's log, `inference.worker.round_log`) -> finish. So "why
was this request slow" has an answer: time queued, prefill, rounds that drafted much and
kept little, big batches, a lost node.

Times are milliseconds after the request was created. A round's time comes from the
verifier's clock (its prefill start plus the round's offset), the rest from the control
plane's: on one machine they agree; across machines they differ by the clocks' skew.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fleet.accounts.access import can
from inference.models import Generation


def may_see(user, generation: Generation) -> bool:
    """Operators and admins: any generation's path; others with "view": one whose content
    they may read (its owner, the content role and group). A timeline holds no text, but its
    shape (lengths, timings) is the owner's business."""
    return can(user, "operate") or can(user, "read_content", generation)


def _ms_after(start: datetime, at: datetime | None) -> float | None:
    return None if at is None else round((at - start).total_seconds() * 1000, 2)


def _parse(at: str) -> datetime | None:
    try:
        return datetime.fromisoformat(at)
    except (TypeError, ValueError):
        return None


def events_of(g: Generation) -> list[dict[str, Any]]:
    """The request's events in time order: {"at_ms", "kind", ...}."""
    t0 = g.created_at
    events: list[dict[str, Any]] = [{"at_ms": 0.0, "kind": "queued", "attempt": 1}]
    for e in g.route_events or []:
        at = _parse(e.get("at", ""))
        events.append(
            {
                "at_ms": _ms_after(t0, at),
                "kind": e.get("kind", "rerouted"),
                "attempt": e.get("attempt"),
                "drafter": e.get("drafter"),
                "verifier": e.get("verifier"),
                "reason": e.get("reason", ""),
            }
        )
    last = {"attempt": g.attempts, "drafter": g.drafter_id, "verifier": g.verifier_id}
    if g.started_at is not None:
        events.append({"at_ms": _ms_after(t0, g.started_at), "kind": "claimed", **last})
    log = g.rounds or {}
    if log.get("t0") is not None:
        prefill_at = datetime.fromtimestamp(float(log["t0"]), tz=UTC)
        events.append(
            {
                "at_ms": _ms_after(t0, prefill_at),
                "kind": "prefill",
                "duration_ms": log.get("prefill_ms"),
                **last,
            }
        )
    if g.first_token_at is not None:
        events.append({"at_ms": _ms_after(t0, g.first_token_at), "kind": "first_token"})
    if g.finished_at is not None:
        events.append(
            {
                "at_ms": _ms_after(t0, g.finished_at),
                "kind": g.state,
                "finish_reason": g.finish_reason,
                "error": g.error[:500],
            }
        )
    return sorted(events, key=lambda e: (e["at_ms"] is None, e["at_ms"] or 0.0))


def rounds_of(g: Generation) -> list[dict[str, Any]]:
    """The last attempt's verify rounds, each at its time after the request was created."""
    log = g.rounds or {}
    if log.get("t0") is None:
        return []
    base = (float(log["t0"]) - g.created_at.timestamp()) * 1000
    names = log.get("fields") or ["at_ms", "k", "accepted", "batch", "verify_ms"]
    out = []
    for row in log.get("rounds") or []:
        r = dict(zip(names, row, strict=False))
        r["at_ms"] = round(base + float(r["at_ms"]), 2)
        out.append(r)
    return out


def summary_of(g: Generation, rounds: list[dict[str, Any]]) -> dict[str, Any]:
    drafted = sum(int(r["k"]) for r in rounds)
    accepted = sum(int(r["accepted"]) for r in rounds)
    batches = [int(r["batch"]) for r in rounds]
    return {
        "attempts": g.attempts,
        "queue_ms": g.queue_ms,
        "ttft_ms": g.ttft_ms,
        "total_ms": g.total_ms,
        "output_tokens": len(g.output_tokens or []),
        "rounds": len(rounds),
        "rounds_not_logged": int((g.rounds or {}).get("dropped") or 0),
        "draft_rounds": sum(1 for r in rounds if r["k"]),
        "drafted": drafted,
        "accepted": accepted,
        "acceptance": accepted / drafted if drafted else None,
        "mean_batch": sum(batches) / len(batches) if batches else None,
        "verify_ms": round(sum(float(r["verify_ms"]) for r in rounds), 2),
    }


def timeline(g: Generation) -> dict[str, Any]:
    rounds = rounds_of(g)
    return {
        "generation": str(g.pk),
        "pipeline": g.pipeline_id,
        "state": g.state,
        "created_at": g.created_at.isoformat(),
        "events": events_of(g),
        "rounds": rounds,
        "summary": summary_of(g, rounds),
    }
