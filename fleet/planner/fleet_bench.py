"""`bench_fleet_api`: the control plane's answers at fleet scale, timed in-process.

A simulated fleet of `nodes` nodes over `pipelines` pipelines (`simulator.setup_fleet`, bulk
rows) and a live snapshot of one telemetry sample per node (the simulator's samples through
the real aggregator) are made first. Then each request goes through Django's whole stack
(middleware, authentication with a real API key or session, permissions, rendering) with
the test client, and is timed from the call to the response:

- `node_list`: pages of GET /api/v1/nodes for several filters and orderings, walking the
  cursor (`next`) for a few pages each, and once through the whole fleet 200 at a time;
  p50/p99, queries per page, bytes per page;
- `move`: POST /api/v1/pipelines/<a>/nodes/<n>/move between two pipelines (audit, revision
  and the after-commit config push to every worker of both pipelines included);
- `drain`, `return`: POST /api/v1/pipelines/<p>/nodes/<n>/drain|return;
- `metrics`: GET /metrics (per-pipeline series, the default) and /metrics?per_node=1, time
  and bytes;
- `what_if`: POST /api/v1/planner/what-if;
- `fleet_page`: GET /fleet/ (the HTML of the fleet page's first render), time and bytes;
- `pipeline_detail`: GET of one pipeline (at most 100 placements inline, a link to all);
  `pipeline_placements`: the first page of its placements; `pipeline_page`: GET
  /pipelines/<id>/ (the pipeline page's first render);
- `k_policy`: POST .../k-policy, a configuration change: the bounded pipeline answer and the
  push of the new configuration to each of its workers (one pipelined Redis round trip).

Timings are wall-clock on whatever else the machine is doing: report the load with them.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from urllib.parse import urlsplit

from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from fleet.accounts.services import api_key_create, user_set_role

NODE_LIST_CASES = (
    ("by_name", ""),
    ("state_online", "state=online"),
    ("role_verify_by_last_seen_desc", "role=verify&ordering=-last_seen"),
    ("kind_sram_by_state", "kind=sram-accelerator&ordering=state"),
    ("label_by_created_desc", "label=simulated:true&ordering=-created"),
    ("search_limit_200", "search=bench-v&limit=200"),
)
# walked to its last page once per round: the deep pages cost what the first does
WALK_ALL = ("walk_all_by_state_limit_200", "ordering=state&limit=200")
WHAT_IF = {"move_to_verify": 10, "add_drafters": 100, "add_drafter_profile": "groq-lpu"}


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 2)


def summary(samples_s: list[float]) -> dict:
    """p50/p99/max in milliseconds (p99 of fewer than 100 samples is the max or next to it),
    and the first sample's."""
    ordered = sorted(samples_s)
    p99 = ordered[min(len(ordered) - 1, max(0, round(0.99 * len(ordered)) - 1))]
    return {
        "n": len(ordered),
        "p50_ms": _ms(statistics.median(ordered)),
        "p99_ms": _ms(p99),
        "max_ms": _ms(ordered[-1]),
        "first_ms": _ms(samples_s[0]),  # the process's first of its kind: cold caches
    }


def timed(call: Callable):
    start = time.perf_counter()
    response = call()
    return time.perf_counter() - start, response


def _check(response, expected: int = 200):
    if response.status_code != expected:
        body = getattr(response, "content", b"")[:500]
        raise RuntimeError(f"{response.status_code} (wanted {expected}): {body!r}")
    return response


def _user(username: str, role: str):
    from django.contrib.auth import get_user_model

    user, _ = get_user_model().objects.get_or_create(username=username)
    user_set_role(user=user, role=role)
    return user


def _api_client(user) -> Client:
    _, plain = api_key_create(user=user, name="bench_fleet_api")
    return Client(HTTP_AUTHORIZATION=f"Bearer {plain}")


def seed(*, nodes: int, pipelines: int, prefix: str = "bench") -> dict[int, float]:
    from fleet.planner import simulator

    alphas = simulator.setup_fleet(nodes=nodes, pipelines=pipelines, prefix=prefix, reset=True)
    if connection.vendor == "postgresql":  # what autovacuum does to a table that grew
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    return alphas


def write_snapshot(alphas: dict[int, float], *, prefix: str = "bench") -> int:
    """One sample per node through the simulator and the aggregator; the aggregator's
    snapshot is written where /metrics and the pages read it. Returns its size in bytes."""
    from fleet.planner.simulator import Simulator
    from fleet.telemetry.aggregator import Aggregator
    from fleet.telemetry.ingest import client, encode
    from fleet.telemetry.registry import load_registry
    from fleet.telemetry.snapshot import LIVE_KEY

    sim = Simulator(alphas, prefix=prefix)
    sim.load()
    agg = Aggregator()
    agg.set_registry(load_registry())
    now = time.time()
    for tick in range(2):  # two ticks: rates need a previous sample
        for node_id, sample, key in sim.samples(now + tick):
            agg.ingest_entry(encode(node_id, sample, key=key), now=now + tick)
    snap = agg.build(now + 1.5)["snapshot"]
    redis = client()
    redis.delete(LIVE_KEY)
    redis.hset(LIVE_KEY, mapping=snap)
    return sum(len(k) + len(v) for k, v in snap.items())


def bench_node_list(api: Client, *, pages: int, rounds: int) -> dict:
    _check(api.get("/api/v1/nodes?limit=1"))  # untimed: the key's first use writes last-used
    out = {}
    for label, query in (*NODE_LIST_CASES, WALK_ALL):
        times, queries, sizes, rows = [], [], [], 0
        ids: set[int] = set()
        for _ in range(rounds if label != WALK_ALL[0] else 1):
            url = "/api/v1/nodes" + (f"?{query}" if query else "")
            for _page in range(pages if label != WALK_ALL[0] else 10**6):
                with CaptureQueriesContext(connection) as ctx:
                    elapsed, response = timed(lambda url=url: api.get(url))
                _check(response)
                body = response.json()
                times.append(elapsed)
                queries.append(len(ctx.captured_queries))
                sizes.append(len(response.content))
                rows += len(body["results"])
                ids.update(row["id"] for row in body["results"])
                if not body.get("next"):
                    break
                parts = urlsplit(body["next"])
                url = f"{parts.path}?{parts.query}"
        out[label] = {
            **summary(times),
            "query": query,
            "queries_per_page": sorted(set(queries)),
            "bytes_per_page_max": max(sizes),
            "rows_seen": rows,
            "distinct_rows_seen": len(ids),  # fewer than a walk's rows: repeats, so skips
        }
    return {"cases": out, "p99_ms_worst": max(case["p99_ms"] for case in out.values())}


_last_heartbeat = [0.0]


def heartbeat(every_s: float = 4.0) -> None:
    """What the simulated nodes' agents do every few seconds (untimed, at most every
    `every_s`): without it a long run's nodes turn lost, and the actions are refused as they
    should be."""
    from django.utils import timezone

    from fleet.nodes.models import Node

    if time.monotonic() - _last_heartbeat[0] < every_s:
        return
    Node.objects.filter(simulated=True).update(last_seen=timezone.now())
    _last_heartbeat[0] = time.monotonic()


def _placed(pipeline_id: int, role: str, n: int) -> list[int]:
    from fleet.pipelines.models import Placement

    rows = Placement.objects.filter(pipeline_id=pipeline_id, role=role).order_by("node_id")
    return list(rows.values_list("node_id", flat=True)[:n])


def bench_move(api: Client, pipeline_ids: list[int], *, n: int) -> dict:
    a, b = pipeline_ids[0], pipeline_ids[1]
    times, sizes = [], []
    for node_id in _placed(a, "verify", n):
        heartbeat()  # an action may take seconds where it pushes to every worker
        elapsed, response = timed(
            lambda node_id=node_id: api.post(
                f"/api/v1/pipelines/{a}/nodes/{node_id}/move",
                {"to_pipeline": b, "reason": "bench"},
                content_type="application/json",
            )
        )
        _check(response)
        times.append(elapsed)
        sizes.append(len(response.content))
    return {**summary(times), "bytes_max": max(sizes)}


def bench_drain(api: Client, pipeline_id: int, *, n: int) -> dict:
    drains, returns, sizes = [], [], []
    for node_id in _placed(pipeline_id, "draft", n):
        heartbeat()  # an action may take seconds where it pushes to every worker
        base = f"/api/v1/pipelines/{pipeline_id}/nodes/{node_id}"
        elapsed, response = timed(
            lambda base=base: api.post(
                f"{base}/drain", {"reason": "bench"}, content_type="application/json"
            )
        )
        _check(response)
        drains.append(elapsed)
        sizes.append(len(response.content))
        elapsed, response = timed(
            lambda base=base: api.post(f"{base}/return", {}, content_type="application/json")
        )
        _check(response)
        returns.append(elapsed)
    return {
        "drain": {**summary(drains), "bytes_max": max(sizes)},
        "return": summary(returns),
    }


def bench_k_policy(api: Client, pipeline_id: int, *, n: int) -> dict:
    """A configuration change: pushed to every worker of the pipeline (each gets the new k),
    unlike the node actions."""
    times, sizes = [], []
    for i in range(n):
        elapsed, response = timed(
            lambda i=i: api.post(
                f"/api/v1/pipelines/{pipeline_id}/k-policy",
                {"k_policy": {"mode": "fixed", "k": 3 + i % 2}, "reason": "bench"},
                content_type="application/json",
            )
        )
        _check(response)
        times.append(elapsed)
        sizes.append(len(response.content))
    return {**summary(times), "bytes_max": max(sizes)}


def bench_get(client: Client, url: str, *, n: int) -> dict:
    times, sizes = [], []
    for _ in range(n):
        elapsed, response = timed(lambda: client.get(url))
        _check(response)
        times.append(elapsed)
        sizes.append(len(response.content))
    return {**summary(times), "bytes": max(sizes)}


def bench_what_if(api: Client, *, n: int) -> dict:
    times = []
    for _ in range(n):
        elapsed, response = timed(
            lambda: api.post("/api/v1/planner/what-if", WHAT_IF, content_type="application/json")
        )
        _check(response)
        times.append(elapsed)
    return summary(times)


def run(*, nodes: int, pipelines: int, rounds: int = 5, actions: int = 20) -> dict:
    """Seed the fleet, time everything; the figures as one JSON-able dict."""
    from fleet.nodes.models import Node
    from fleet.pipelines.models import Pipeline

    started = time.perf_counter()
    alphas = seed(nodes=nodes, pipelines=pipelines)
    seed_s = time.perf_counter() - started
    snapshot_bytes = write_snapshot(alphas)
    viewer, operator = _user("bench-viewer", "viewer"), _user("bench-operator", "operator")
    view, operate = _api_client(viewer), _api_client(operator)
    page = Client()
    page.force_login(viewer)
    pipeline_ids = sorted(alphas)
    result = {
        "nodes": Node.objects.count(),
        "pipelines": Pipeline.objects.count(),
        "database": connection.vendor,
        "seed_s": round(seed_s, 2),
        "snapshot_bytes": snapshot_bytes,
        "node_list": bench_node_list(view, pages=4, rounds=rounds),
        "metrics": bench_get(view, "/metrics", n=rounds),
        # ~7 KB of text a node: one scrape at 10,000 nodes takes minutes on a busy 2-core box
        "metrics_per_node": bench_get(view, "/metrics?per_node=1", n=1),
        "what_if": bench_what_if(view, n=rounds),
        "fleet_page": bench_get(page, "/fleet/", n=rounds),
        "pipeline_detail": bench_get(view, f"/api/v1/pipelines/{pipeline_ids[0]}", n=rounds),
        "pipeline_placements": bench_get(
            view, f"/api/v1/pipelines/{pipeline_ids[0]}/placements", n=rounds
        ),
        "pipeline_page": bench_get(page, f"/pipelines/{pipeline_ids[0]}/", n=rounds),
    }
    result["move"] = bench_move(operate, pipeline_ids, n=actions)
    result.update(bench_drain(operate, pipeline_ids[-1], n=actions))
    result["k_policy"] = bench_k_policy(operate, pipeline_ids[-1], n=min(actions, 5))
    result["seconds"] = round(time.perf_counter() - started, 1)
    return result
