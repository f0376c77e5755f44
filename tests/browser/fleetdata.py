"""A small believable fleet for the browser tests: nodes, tokens, a pipeline, 30 minutes of
rollup history (so charts have a past), and a feeder thread that publishes live samples."""

from __future__ import annotations

import math
import random
import threading
import time
from datetime import UTC, datetime, timedelta

from fleet.telemetry.accumulators import Acc, derive
from fleet.telemetry.ingest import publish_sample
from fleet.telemetry.merge import FLEET_ALL, FLEET_REAL, FLEET_SIMULATED
from fleet.telemetry.models import Rollup
from fleet.telemetry.samples import normalize
from tests.telemetry import factories as f


def build() -> dict:
    p = f.pipeline(name="chat-8b")
    gpu = f.profile("h100-sxm")
    sram = f.profile("sram-card")
    sram.kind, sram.vendor, sram.model, sram.tdp_w = "sram-accelerator", "SRAM", "Card", 75
    sram.save()
    nodes = []
    for i in range(2):
        n, t = f.node(name=f"gpu-verify-{i + 1}")
        n.profile = gpu
        n.save()
        f.place(n, p, "verify")
        nodes.append((n, t, "verify"))
    for i in range(4):
        n, t = f.node(name=f"sram-draft-{i + 1}", simulated=(i == 3))
        n.profile = sram
        n.save()
        f.place(n, p, "draft")
        nodes.append((n, t, "draft"))
    probe, probe_token = f.node(name="probe-1")
    f.node(name="gpu-spare-1", state="lost")
    f.node(name="gpu-new-1", state="registered")
    _history(p, [n for n, _, _ in nodes])
    return {"pipeline": p, "nodes": nodes, "probe": (probe, probe_token)}


def sample(role: str, rng: random.Random, now: float, phase: float = 0.0, k: int = 4) -> dict:
    wave = 0.5 + 0.5 * math.sin(now / 60.0 + phase)
    if role == "verify":
        batch = rng.choice((12, 16, 16, 24))
        drafts = batch * 6
        alpha = 0.74 + 0.06 * wave
        per_pos = [int(drafts * alpha ** (i + 1)) for i in range(k)]
        accepted = sum(per_pos)
        return f.verify_sample(
            ts=now,
            num_drafts=drafts,
            num_draft_tokens=drafts * k,
            num_accepted_tokens=accepted,
            num_accepted_tokens_per_pos=per_pos,
            generation_tokens=accepted + drafts,
            verify_batch_hist={str(batch): 6},
            verify_step_s=0.028 + batch * 0.0008,
            num_requests_running=batch,
            kv_slots_used=batch * 4,
            kv_slots_total=128,
            itl_s=[rng.uniform(0.018, 0.03) for _ in range(12)] + [rng.uniform(0.04, 0.09)],
            ttft_s=[rng.uniform(0.08, 0.2)],
            power_w=rng.uniform(520, 640),
            power_source="measured-nvml",
            utilization=rng.uniform(0.7, 0.9),
        )
    return f.draft_sample(
        ts=now,
        power_w=rng.uniform(48, 62),
        utilization=rng.uniform(0.55, 0.8),
        draft_steps=240,
        draft_step_s=0.0035,
        k_hist={f"{rng.choice((12, 16))}:{k}": 60},  # k chosen per round, by batch size
    )


def _history(p, nodes) -> None:
    """30 minutes of 10 s rollups for the fleet, the pipeline and each node."""
    rng = random.Random(3)
    now = time.time()
    start = math.floor((now - 1800) / 10) * 10
    rows = []
    for k in range(180):
        t = start + 10 * k
        fleet = Acc()
        by_class = {False: Acc(), True: Acc()}  # the fleet's real and simulated nodes apart
        for j, n in enumerate(nodes):
            role = "verify" if n.name.startswith("gpu") else "draft"
            acc = Acc()
            for s in range(10):
                acc.add_sample(normalize(sample(role, rng, t + s, phase=j)))
            rows.append(
                Rollup(
                    scope="node", scope_id=n.pk, resolution_s=10, start=_dt(t), data=derive(acc, 10)
                )
            )
            fleet.add(acc)
            by_class[n.simulated].add(acc)
        data = derive(fleet, 10)
        rows.append(
            Rollup(scope="pipeline", scope_id=p.pk, resolution_s=10, start=_dt(t), data=data)
        )
        rows.append(
            Rollup(scope="fleet", scope_id=FLEET_ALL, resolution_s=10, start=_dt(t), data=data)
        )
        for simulated, acc in by_class.items():
            scope_id = FLEET_SIMULATED if simulated else FLEET_REAL
            rows.append(
                Rollup(
                    scope="fleet",
                    scope_id=scope_id,
                    resolution_s=10,
                    start=_dt(t),
                    data=derive(acc, 10),
                )
            )
    # The running aggregator may have written the latest bucket already: its row stays.
    Rollup.objects.bulk_create(rows, ignore_conflicts=True)


def _dt(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=UTC) - timedelta(seconds=0)


class Feeder(threading.Thread):
    """Publishes one sample per node per second until stopped."""

    def __init__(self, nodes, k: int = 4):
        super().__init__(daemon=True, name="feeder")
        self.nodes = nodes
        self.k = k  # draft tokens per round in the verifiers' samples (set it to follow k)
        self.halt = threading.Event()
        self.rng = random.Random(11)

    def run(self):
        while not self.halt.is_set():
            now = time.time()
            for j, (n, token, role) in enumerate(self.nodes):
                publish_sample(n.pk, sample(role, self.rng, now, phase=j, k=self.k), token=token)
            self.halt.wait(1.0)

    def stop(self):
        self.halt.set()
        self.join(timeout=5)
