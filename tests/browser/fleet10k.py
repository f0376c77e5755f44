"""A 10,000-node fleet for the browser: the nodes in the database (so the page's first render
and its counts are real) and a synthetic publisher that sends the fleet feed through the
real channel layer and Redis, as the aggregator's publishing point does (fleet.telemetry.feed),
twice a second, every node's figures moving every tick (the worst case: noise the simulator
makes, well above display precision). Running the real simulator at 10,000 nodes needs more
than this 2-core machine has left beside daphne and Chromium: the publisher stands in for it
and the aggregator, and is the same code path from `feed.publish` on."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from typing import cast

from django.conf import settings

from fleet.nodes.models import Node
from fleet.pipelines.models import Pipeline, Placement
from tests.telemetry import factories as f

TICK_S = 0.5  # the aggregator's tick


def create(n: int, pipelines: int = 4) -> list[dict]:
    """n nodes in `pipelines` pipelines (bulk inserts); the rows the publisher starts from."""
    gpu = f.profile("h100-sxm")
    pipes = [
        Pipeline.objects.create(name=f"pipe-{i}", target_model="t", draft_model="d")
        for i in range(pipelines)
    ]
    Node.objects.bulk_create(
        [
            Node(
                name=f"node-{i:05d}",
                profile=gpu,
                roles=["draft", "verify"],
                state="online",
                simulated=True,
            )
            for i in range(n)
        ],
        batch_size=2000,
    )
    nodes = list(Node.objects.order_by("name").values_list("id", "name"))
    placements = []
    rows = []
    for i, (nid, name) in enumerate(nodes):
        pipe = pipes[i % pipelines]
        role = "verify" if i % 4 == 0 else "draft"
        placements.append(Placement(node_id=nid, pipeline=pipe, role=role))
        rows.append(
            {
                "id": nid,
                "name": name,
                "state": "online",
                "role": role,
                "pipeline": pipe.pk,
                "sim": True,
                "kind": "gpu",
            }
        )
    Placement.objects.bulk_create(placements, batch_size=2000)
    return rows


class Owner:
    """What `feed.publish` keeps its builder on (the aggregator, in production)."""


class Publisher(threading.Thread):
    """Publishes the fleet feed of `rows` every TICK_S until stopped; `change_state(id, s)`
    makes the next tick carry a state change and records when that tick was sent."""

    def __init__(self, rows: list[dict]):
        super().__init__(daemon=True, name="fleet10k-publisher")
        self.rows = rows
        self.halt = threading.Event()
        self.rng = random.Random(5)
        self.pending: dict[int, str] = {}
        self.sent_at: dict[tuple[int, str], float] = {}
        self.ticks = 0
        self.tick_s: list[float] = []
        self.lock = threading.Lock()
        self.error: BaseException | None = None

    def change_state(self, node_id: int, state: str) -> None:
        with self.lock:
            self.pending[node_id] = state

    def run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # reported by the test
            self.error = exc

    def _build(self, now: float) -> dict:
        rng = self.rng
        node_rows = {}
        for r in self.rows:
            verify = r["role"] == "verify"
            node_rows[r["id"]] = {
                **r,
                "power_w": rng.uniform(450, 650) if verify else rng.uniform(60, 90),
                "src": "modeled",
                "util": rng.uniform(0.5, 0.95),
                "batch": rng.choice((8.0, 16.0, 24.0)) if verify else None,
                "tps": rng.uniform(300, 900) if verify else None,
                "acc": rng.uniform(0.55, 0.8) if verify else None,
                "seen_s": rng.uniform(0, 1),
            }
        kpis = {
            "nodes": 0,
            "reporting": 0,
            "tokens_per_s": None,
            "power_w": None,
            "power_source": None,
            "tokens_per_j": None,
            "tokens_per_j_draft": None,
            "tokens_per_j_verify": None,
            "acceptance_rate": None,
            "mean_acceptance_length": None,
            "alpha": None,
            "last_measured": None,
        }
        states: dict[str, int] = {}
        for r in self.rows:
            states[r["state"]] = states.get(r["state"], 0) + 1
        power = sum(r["power_w"] for r in node_rows.values())
        wall = {
            "type": "fleet.update",
            "ts": now,
            "newest_ts": now - 0.2,
            "totals": {
                "nodes": len(self.rows),
                "states": states,
                "power_w": power,
                "power_source": "modeled",
                "tokens_per_s": None,
                "tokens_per_j": None,
                "simulated_nodes": len(self.rows),
            },
            "kpis": kpis,
            "kpis_simulated": {**kpis, "nodes": len(self.rows), "power_w": power},
            "stats": {},
            "pipelines": [
                {"id": pid, "name": f"pipe-{i}"}
                for i, pid in enumerate(sorted({r["pipeline"] for r in self.rows}))
            ],
        }
        return {"node_rows": node_rows, "wall": wall}

    async def _main(self) -> None:
        import redis.asyncio as aioredis
        from channels_redis.core import RedisChannelLayer

        from fleet.telemetry import feed

        config = cast(dict, settings.CHANNEL_LAYERS["default"]["CONFIG"])
        layer = RedisChannelLayer(**config)
        r = aioredis.from_url(settings.REDIS_URL)
        owner = Owner()
        next_at = time.monotonic()
        try:
            while not self.halt.is_set():
                with self.lock:
                    changes, self.pending = self.pending, {}
                for r_ in self.rows:
                    if r_["id"] in changes:
                        r_["state"] = changes[r_["id"]]
                started = time.perf_counter()
                now = time.time()  # the message's `ts`: the state change's time from here on
                await feed.publish(owner, r, layer, self._build(now), now)
                self.tick_s.append(time.perf_counter() - started)
                for nid, state in changes.items():
                    self.sent_at[(nid, state)] = now
                self.ticks += 1
                next_at += TICK_S
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        finally:
            await r.aclose()

    def stop(self) -> None:
        self.halt.set()
        self.join(timeout=10)
