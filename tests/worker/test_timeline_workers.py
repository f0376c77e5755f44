"""A generation's timeline through the real parts: real worker processes over real Redis,
the real ledger process (`manage.py run_ledger`) writing the rows, and a real OTLP/HTTP
receiver for the spans it exports. The timeline must match the ledger's own figures."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from inference.models import Generation
from inference.timeline import timeline
from tests.worker.helpers import Workers, make_pipeline, wait_done, wait_online, write_pair
from tests.worker.test_workers import prompts, submit

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


class OtlpReceiver:
    """An OTLP/HTTP traces endpoint: decodes each export (protobuf) and keeps its spans."""

    def __init__(self):
        self.spans: list = []
        received = self.spans

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
                for rs in request.resource_spans:
                    for ss in rs.scope_spans:
                        received.extend(ss.spans)
                answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def trace(self, generation: Generation) -> dict:
        tid = generation.pk.bytes
        return {s.name: s for s in self.spans if s.trace_id == tid}


def test_a_generations_timeline_matches_its_ledger_row_and_is_exported_as_spans(
    live_server, tmp_path, settings, monkeypatch
):
    settings.HEARTBEAT_PERIOD_S = 1
    receiver = OtlpReceiver()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)  # the ledger's env
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    target, draft = write_pair(tmp_path)
    pipeline, nodes = make_pipeline(
        "timeline",
        target,
        draft,
        max_verify_batch=32,
        max_batch_wait_ms=20,
        k_policy={"mode": "fixed", "k": 4},
    )
    with Workers(tmp_path, api_url=live_server.url) as workers:
        for node, role, token in nodes:
            workers.start(node, role, token)
        wait_online(nodes, workers)
        gens = [submit(pipeline, p, 24) for p in prompts(6)]
        wait_done([g.pk for g in gens], workers=workers)
        deadline = time.monotonic() + 30
        while Generation.objects.filter(state="finished").count() < len(gens):
            assert time.monotonic() < deadline, workers.logs()
            time.sleep(0.2)
        while not all(len(receiver.trace(g)) == 4 for g in gens):
            assert time.monotonic() < deadline, (len(receiver.spans), workers.logs())
            time.sleep(0.2)

    for g in gens:
        g.refresh_from_db()
        t = timeline(g)
        rounds, s, c = t["rounds"], t["summary"], g.counters
        # the verifier's log and its counters agree, round for round
        assert rounds and s["drafted"] == c["num_draft_tokens"]
        assert s["accepted"] == c["num_accepted_tokens"]
        assert s["draft_rounds"] == c["num_drafts"]
        # each round emits its accepted tokens and one more; the prefill emits the first
        assert len(g.output_tokens) <= 1 + sum(r["accepted"] + 1 for r in rounds)
        assert all(1 <= r["batch"] <= 6 and r["k"] <= 4 for r in rounds)
        # in order, on one clock: created, claimed, prefill, first token, rounds, finish
        kinds = [e["kind"] for e in t["events"]]
        assert kinds[0] == "queued" and kinds[-1] == "finished", kinds
        assert {"claimed", "prefill", "first_token"} <= set(kinds)
        at = [r["at_ms"] for r in rounds]
        assert at == sorted(at) and 0 < at[0] and at[-1] <= s["total_ms"] + 50

        spans = receiver.trace(g)
        assert set(spans) == {"generation", "queue", "prefill", "decode"}
        root = spans["generation"]
        assert all(spans[n].parent_span_id == root.span_id for n in ("queue", "prefill", "decode"))
        events = [e for e in spans["decode"].events if e.name == "verify_round"]
        assert len(events) == len(rounds)
        attrs = {a.key: a.value for a in root.attributes}
        assert attrs["tandem.spec.accepted_tokens"].int_value == c["num_accepted_tokens"]
        assert attrs["gen_ai.usage.output_tokens"].int_value == len(g.output_tokens)
