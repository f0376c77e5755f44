"""The load of `manage.py bench_telemetry`: simulated nodes publishing signed samples through
the real ingest path (templated: `fleet.telemetry.templates`), and the scale-out measure.

- `publish(nodes, stop, cpu)`: every node once a second, spread over the second in pipelined
  batches; `cpu["s"]` accumulates the publishing thread's own CPU time (simulator_cpu).
- `absorb_rate(...)`: how many samples/s the running aggregators take in when offered more
  than they can: with the aggregators paused (SIGSTOP, their leases held for them meanwhile),
  a backlog of signed samples is put on the streams; then they resume and the merged sample
  counter (the leader's meta) is sampled until the backlog is in. The rate is the slope
  between 20% and 80% of the backlog (start-up and the last partial's delay left out).
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time

VARIANTS = 16  # sample shapes per role: a node sends a different one each second


def sample(role: str, rng, now: float) -> dict:
    if role == "verify":
        batch = rng.choice((8, 16, 24, 32))
        drafts = batch * 10
        per_pos = [int(drafts * 0.8 ** (i + 1) * rng.uniform(0.95, 1.05)) for i in range(4)]
        accepted = sum(per_pos)
        return {
            "ts": now,
            "interval_s": 1.0,
            "role": "verify",
            "simulated": True,
            "num_drafts": drafts,
            "num_draft_tokens": drafts * 4,
            "num_accepted_tokens": accepted,
            "num_accepted_tokens_per_pos": per_pos,
            "generation_tokens": accepted + drafts,
            "verify_batch_hist": {str(batch): 10},
            "verify_step_s": 0.03 + batch * 0.001,
            "num_requests_running": batch,
            "num_requests_waiting": rng.randint(0, 4),
            "itl_s": [rng.uniform(0.02, 0.08) for _ in range(4)],
            "power_w": rng.uniform(450, 650),
            "power_source": "modeled",
            "utilization": rng.uniform(0.6, 0.95),
        }
    return {
        "ts": now,
        "interval_s": 1.0,
        "role": "draft",
        "simulated": True,
        "draft_steps": 160,
        "draft_step_s": 0.004,
        "power_w": rng.uniform(60, 90),
        "power_source": "modeled",
        "utilization": rng.uniform(0.5, 0.9),
    }


def templates():
    from fleet.telemetry.templates import Templates

    rng = random.Random(7)
    out = Templates()
    for role in ("verify", "draft"):
        for v in range(VARIANTS):
            out.shape((role, v), sample(role, rng, 0.0))
    return out


def publish(nodes: list, stop: threading.Event, cpu: dict, slices: int = 20) -> None:
    """Every node once a second, spread over the second in `slices` pipelined batches."""
    from fleet.telemetry.ingest import client, publish_encoded

    started = time.thread_time()
    shapes = templates()
    r = client()
    per_slice = max(1, -(-len(nodes) // slices))
    chunks = [nodes[i : i + per_slice] for i in range(0, len(nodes), per_slice)]
    step = 1.0 / len(chunks)
    next_at = time.monotonic()
    second = 0
    try:
        while not stop.is_set():
            second += 1
            for chunk in chunks:
                now = time.time()
                publish_encoded(
                    (
                        (nid, shapes.entry(nid, key, (role, (nid + second) % VARIANTS), now))
                        for nid, key, role, _ in chunk
                    ),
                    redis=r,
                )
                next_at += step
                delay = next_at - time.monotonic()
                if delay > 0:
                    if stop.wait(delay):
                        return
                elif delay < -2.0:
                    next_at = time.monotonic()  # fell behind: do not burst
    finally:
        cpu["s"] = cpu.get("s", 0.0) + time.thread_time() - started


def backlog(nodes: list, per_node: int, *, base: float) -> int:
    """`per_node` samples of every node, dated base, base+1, ... (older than now)."""
    from fleet.telemetry.ingest import client, publish_encoded

    shapes = templates()
    r = client()
    count = 0
    for k in range(per_node):
        for i in range(0, len(nodes), 2000):
            chunk = nodes[i : i + 2000]
            count += publish_encoded(
                (
                    (nid, shapes.entry(nid, key, (role, (nid + k) % VARIANTS), base + k))
                    for nid, key, role, _ in chunk
                ),
                redis=r,
            )
    return count


def hold_leases(seconds: float) -> None:
    """Keep the paused aggregators' leases and memberships from lapsing while paused."""
    from fleet.telemetry.ingest import SHARDS, client
    from fleet.telemetry.shards import LEASE_PREFIX, MEMBERS_KEY

    r = client()
    until_ms = int((time.time() + seconds) * 1000)
    for i in range(SHARDS):
        r.pexpire(f"{LEASE_PREFIX}{i}", int(seconds * 1000))
    members: list = r.zrange(MEMBERS_KEY, 0, -1)
    if members:
        r.zadd(MEMBERS_KEY, dict.fromkeys(members, until_ms))


def absorb_rate(pids: list[int], nodes: list, per_node: int, read_samples) -> dict:
    """Pause the aggregators, put a backlog on the streams, resume: samples/s absorbed."""
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        hold_leases(60.0)
        time.sleep(0.3)
        before = read_samples()
        started = time.monotonic()
        total = backlog(nodes, per_node, base=time.time() - per_node - 5.0)
        pushed_s = time.monotonic() - started
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    resumed = time.monotonic()
    series = []
    deadline = resumed + 120.0
    while time.monotonic() < deadline:
        got = read_samples() - before
        series.append((time.monotonic() - resumed, got))
        if got >= total:
            break
        time.sleep(0.05)
    lo, hi = 0.2 * total, 0.8 * total
    t_lo = next((t for t, n in series if n >= lo), None)
    t_hi = next((t for t, n in series if n >= hi), None)
    rate = (hi - lo) / (t_hi - t_lo) if t_lo is not None and t_hi and t_hi > t_lo else None
    return {
        "backlog": total,
        "backlog_push_s": round(pushed_s, 2),
        "absorbed": series[-1][1] if series else 0,
        "drain_s": round(series[-1][0], 2) if series else None,
        "samples_per_s": round(rate) if rate else None,
    }
