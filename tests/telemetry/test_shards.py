"""Several aggregator processes split the shards; a killed one's shards are taken over within
5 s and the rollups of the bucket it died in are complete. Real processes, Redis, database."""

import math
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.conf import settings as django_settings

from fleet.telemetry.ingest import SHARDS, client, publish_many, stream_of, unpack
from fleet.telemetry.models import Rollup
from fleet.telemetry.shards import LEASE_PREFIX
from tests.telemetry import factories as f

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

N_NODES = 32
PERIOD_S = 0.5


def _owners() -> dict[int, str | None]:
    r = client()
    values: list = r.mget([f"{LEASE_PREFIX}{i}" for i in range(SHARDS)])
    return {i: (v.decode() if v else None) for i, v in enumerate(values)}


def _start(env) -> subprocess.Popen:
    manage = str(Path(django_settings.BASE_DIR) / "manage.py")
    return subprocess.Popen(
        [sys.executable, manage, "run_aggregator", "--tick", "0.2"],
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
    )


def _wait(predicate, timeout: float, step: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(step)
    return predicate()


def test_a_killed_aggregators_shards_are_taken_over_with_no_lost_rollups(settings, monkeypatch):
    db = settings.DATABASES["default"]
    if not db["ENGINE"].endswith("sqlite3"):
        pytest.skip("the aggregators read the test DB through DATABASE_URL (SQLite here)")
    p = f.pipeline()
    nodes = []
    for i in range(N_NODES):
        n, token = f.node(name=f"shard-{i:02d}")
        f.place(n, p, "verify")
        nodes.append((n.id, f.key_of(n.id, token)))
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{db['NAME']}",
        "REDIS_URL": settings.REDIS_URL,
        "PYTHONUNBUFFERED": "1",
    }
    procs = [_start(env), _start(env)]
    stop = threading.Event()

    def publish():
        r = client()
        while not stop.is_set():
            now = time.time()
            publish_many(
                ((nid, f.verify_sample(ts=now, interval_s=PERIOD_S), key) for nid, key in nodes),
                redis=r,
            )
            stop.wait(PERIOD_S)

    publisher = threading.Thread(target=publish, daemon=True)
    try:
        split = _wait(
            lambda: (
                len({o for o in _owners().values() if o}) == 2 and None not in _owners().values()
            ),
            timeout=30,
        )
        assert split, f"two aggregators share the shards: {_owners()}"
        publisher.start()
        # kill one in the middle of the next 10 s bucket (the first one both saw whole)
        now = time.time()
        time.sleep(math.floor(now / 10) * 10 + 14.0 - now)
        victim, survivor = procs
        owners = _owners()
        victim_id = next(o for o in owners.values() if o and o.startswith(f"{victim.pid}-"))
        killed_at = time.time()
        os.killpg(victim.pid, signal.SIGKILL)
        victim.wait()
        taken = _wait(
            lambda: all(o and not o.startswith(f"{victim.pid}-") for o in _owners().values()),
            timeout=10,
            step=0.05,
        )
        took = time.time() - killed_at
        assert taken and took <= 5.0, f"takeover took {took:.1f} s ({_owners()}, {victim_id})"
        killed_bucket = math.floor(killed_at / 10) * 10
        start = datetime.fromtimestamp(killed_bucket, tz=UTC)
        # its rollups are written after the bucket ends (+ the leader's wait for every shard):
        # until every node's row and the fleet's are there, the publisher keeps going
        bucket = Rollup.objects.filter(resolution_s=10, start=start)
        _wait(
            lambda: (
                bucket.filter(scope="node").count() == N_NODES
                and bucket.filter(scope="fleet").exists()
            ),
            timeout=killed_bucket + 10 + 20 - time.time(),
            step=0.2,
        )
        stop.set()
        publisher.join(timeout=5)
        rows = {
            r.scope_id: r.data
            for r in _wait(
                lambda: list(Rollup.objects.filter(scope="node", resolution_s=10, start=start)),
                timeout=5,
            )
        }
        r = client()
        lo, hi = int(killed_bucket * 1000), int((killed_bucket + 10) * 1000) - 1
        for nid, _ in nodes:
            entries: list = r.xrange(stream_of(nid), min=lo, max=hi)  # type: ignore[assignment]
            published = sum(1 for _, fields in entries if int(unpack(fields)["node"]) == nid)
            assert published >= 15
            assert nid in rows, f"node {nid} has no rollup for the bucket of the kill"
            # every sample of the bucket counted once: 34 tokens each over the 10 s bucket
            assert rows[nid]["tokens_per_s"] == pytest.approx(34 * published / 10, rel=1e-6)
        fleet_row = _wait(
            lambda: Rollup.objects.filter(scope="fleet", resolution_s=10, start=start).first(),
            timeout=5,
        )
        assert fleet_row is not None
        assert fleet_row.data["tokens_per_s"] == pytest.approx(
            sum(row["tokens_per_s"] for row in rows.values()), rel=1e-3
        )
        assert survivor.poll() is None
    finally:
        stop.set()
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
