"""A finished generation's timeline as OpenTelemetry spans, sent to an OTLP endpoint.

Off by default. On when the standard OpenTelemetry variables name an endpoint
(`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT`, OTLP over HTTP with
protobuf; headers, timeout and the rest from the same `OTEL_EXPORTER_OTLP_*` variables). The
ledger consumer, which writes every finish, exports each one after its commit.

One trace per generation, its trace id the generation's id (so a trace is found by the id an
API answer carries): a root span `generation` (created -> finished) with the request's figures
as attributes and its re-routes as events; children `queue` (created -> claimed), `prefill`
and `decode` (first token -> finish), the decode span carrying one `verify_round` event per
round (k, accepted, batch, forward time). Times and figures are `inference.timeline`'s.
"""

from __future__ import annotations

import logging
import os
import uuid
from datetime import datetime
from typing import Any

from inference.models import Generation
from inference.report_checks import MAX_ROUNDS
from inference.timeline import timeline

logger = logging.getLogger(__name__)

ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
_provider: Any = None


def enabled() -> bool:
    return any(os.environ.get(name) for name in ENDPOINT_VARS)


def provider():
    """The process's tracer provider: batched OTLP/HTTP export, built on first use."""
    global _provider
    if _provider is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import SpanLimits, TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        p = TracerProvider(
            resource=Resource.create(
                {"service.name": os.environ.get("OTEL_SERVICE_NAME", "tandem")}
            ),
            span_limits=SpanLimits(max_events=MAX_ROUNDS + 32),
        )
        p.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        _provider = p
    return _provider


def _ns(created: datetime, at_ms: float | None) -> int | None:
    if at_ms is None:
        return None
    return int(created.timestamp() * 1e9 + at_ms * 1e6)


def record(generation: Generation, tracer) -> None:
    """Write the generation's spans with `tracer` (an SDK tracer: the exporter's, or a
    test's in-memory one)."""
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    t = timeline(generation)
    created = generation.created_at
    events = {e["kind"]: e for e in t["events"]}
    end_ms = t["summary"]["total_ms"]
    if end_ms is None:
        return  # not finished: nothing to export yet
    # the trace id is the generation's id: a remote parent that only carries it
    parent = NonRecordingSpan(
        SpanContext(
            trace_id=uuid.UUID(t["generation"]).int,
            span_id=uuid.uuid4().int >> 64,
            is_remote=True,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
        )
    )
    s = t["summary"]
    root = tracer.start_span(
        "generation",
        context=trace.set_span_in_context(parent),
        start_time=_ns(created, 0.0),
        attributes={
            "tandem.generation.id": t["generation"],
            "tandem.pipeline.id": t["pipeline"],
            "tandem.state": t["state"],
            "tandem.finish_reason": generation.finish_reason,
            "tandem.attempts": s["attempts"],
            "gen_ai.usage.input_tokens": len(generation.prompt_tokens or []),
            "gen_ai.usage.output_tokens": s["output_tokens"],
            "tandem.spec.rounds": s["rounds"],
            "tandem.spec.draft_tokens": s["drafted"],
            "tandem.spec.accepted_tokens": s["accepted"],
            **({"tandem.drafter.id": generation.drafter_id} if generation.drafter_id else {}),
            **({"tandem.verifier.id": generation.verifier_id} if generation.verifier_id else {}),
        },
    )
    for e in t["events"]:
        if e["kind"] in ("rerouted", "degraded") and e["at_ms"] is not None:
            root.add_event(
                e["kind"],
                {"attempt": e["attempt"] or 0, "reason": e["reason"]},
                timestamp=_ns(created, e["at_ms"]),
            )
    inside = trace.set_span_in_context(root)

    def child(name: str, start_ms, stop_ms, **attributes):
        if start_ms is None or stop_ms is None:
            return None
        # inside the root (a node's clock may run a little apart from the control plane's)
        start_ms = min(max(start_ms, 0.0), end_ms)
        stop_ms = min(max(stop_ms, start_ms), end_ms)
        span = tracer.start_span(
            name, context=inside, start_time=_ns(created, start_ms), attributes=attributes
        )
        return span, _ns(created, stop_ms)

    claimed = events.get("claimed", {}).get("at_ms")
    prefill = events.get("prefill", {})
    first = events.get("first_token", {}).get("at_ms")
    spans = [
        child("queue", 0.0, claimed),
        child(
            "prefill", prefill.get("at_ms"), _plus(prefill.get("at_ms"), prefill.get("duration_ms"))
        ),
    ]
    decode = child("decode", first, end_ms, **{"tandem.spec.rounds": s["rounds"]})
    if decode is not None:
        span, _ = decode
        for r in t["rounds"]:
            span.add_event(
                "verify_round",
                {
                    "k": int(r["k"]),
                    "accepted": int(r["accepted"]),
                    "batch": int(r["batch"]),
                    "verify_ms": float(r["verify_ms"]),
                },
                timestamp=_ns(created, r["at_ms"]),
            )
    for pair in [*spans, decode]:
        if pair is not None:
            pair[0].end(end_time=pair[1])
    root.end(end_time=_ns(created, end_ms))


def _plus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a + b


def export(generation_id) -> None:
    """After a finish committed: the generation's spans to the OTLP endpoint (batched, in the
    background). Never raises: tracing must not stop the ledger."""
    if not enabled():
        return
    try:
        g = Generation.objects.filter(pk=generation_id).first()
        if g is not None:
            record(g, provider().get_tracer("tandem.timeline"))
    except Exception:
        logger.exception("OpenTelemetry export of generation %s failed", generation_id)


def flush(timeout_ms: int = 5000) -> bool:
    return True if _provider is None else bool(_provider.force_flush(timeout_ms))
