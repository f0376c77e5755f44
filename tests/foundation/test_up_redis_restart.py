"""`manage.py up` survives its own Redis: SIGKILL of the embedded Redis during 4 streams.
The supervisor reaps it and restarts it (same port and password, its append-only file
replayed); the console's banner says so while it is down and `/healthz` says Redis is down;
requests made meanwhile get a 503 and leave no `queued` row; serving works again within
30 s of the kill; `up` stops cleanly afterwards.

Started the way tests/foundation/test_up_supervision.py starts `up` (its helpers)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest

from fleet.runtime.supervision import problems
from tests.foundation.helpers import REPO
from tests.foundation.test_up_supervision import PROMPTS, Stream, _pid_of, _wait, demo_up

pytestmark = [pytest.mark.slow, pytest.mark.timeout(480)]

SETUP = """
import json, time
from fleet.accounts.services import api_key_create, user_set_role
from django.contrib.auth import get_user_model
from fleet.nodes.models import Node
deadline = time.monotonic() + 240
while Node.objects.filter(name__in=["demo-draft", "demo-verify"], state="online").count() < 2:
    assert time.monotonic() < deadline, "the demo nodes did not come online"
    time.sleep(0.3)
user = get_user_model().objects.create_user(username="e2e", password=None)
user_set_role(user=user, role="admin")
print(json.dumps({"key": api_key_create(user=user, name="e2e")[1]}))
"""

ROWS = """
import json
from inference.models import Generation
print(json.dumps(list(Generation.objects.values_list("state", flat=True))))
"""


class Watch(threading.Thread):
    """From the kill on, until stopped: what the console's banner shows (the supervisor's
    state file it renders, read every 10 ms: the outage lasts about a second, too short
    for a page of a web process busy with reconnecting), and /healthz."""

    def __init__(self, data_dir, base: str):
        super().__init__(daemon=True)
        self.data_dir, self.base, self.stop = data_dir, base, threading.Event()
        self.banner: dict | None = None
        self.banner_at: float | None = None
        self.health: list[dict] = []

    def run(self):
        prober = threading.Thread(target=self._probe, daemon=True)
        prober.start()
        while not self.stop.is_set():
            if self.banner is None:
                shown = [c for c in problems(self.data_dir) if c["name"] == "redis"]
                if shown:
                    self.banner, self.banner_at = shown[0], time.monotonic()
            self.stop.wait(0.01)
        prober.join(5)

    def _probe(self):
        while not self.stop.is_set():
            try:
                self.health.append(httpx.get(f"{self.base}/healthz", timeout=5).json())
            except (httpx.HTTPError, ValueError):
                pass
            self.stop.wait(0.1)


def test_up_restarts_a_killed_embedded_redis_and_serves_again(tmp_path):
    env, base, log = demo_up(tmp_path)
    data_dir = tmp_path / "data"
    manage = [sys.executable, "manage.py"]
    with log.open("w") as out:
        up = subprocess.Popen(
            [*manage, "up"], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        _wait(
            lambda: "Press Ctrl-C to stop." in log.read_text() or up.poll() is not None,
            240,
            "up ready",
            log,
        )
        assert up.poll() is None, log.read_text()
        setup = subprocess.run(
            [*manage, "shell", "-c", SETUP],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert setup.returncode == 0, setup.stderr + log.read_text()
        key = json.loads(setup.stdout.strip().splitlines()[-1])["key"]
        api = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=30)
        size_before = log.stat().st_size

        streams = [Stream(base, key, p) for p in PROMPTS]
        for s in streams:
            s.start()
        _wait(lambda: all(len(s.lines) >= 3 for s in streams), 120, "4 streams flowing", log)

        victim = _pid_of(log, "redis")
        assert victim, log.read_text()
        watch = Watch(data_dir, base)
        watch.start()
        os.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic()

        # Requests while it is down (or just back): a 503 or an answer, never a 500.
        body = {"model": "demo", "prompt": "def g(x):", "max_tokens": 4, "temperature": 0}
        answers = []
        while time.monotonic() - killed_at < 30:
            response = api.post("/v1/completions", json=body)
            answers.append(response.status_code)
            assert response.status_code in (200, 503), response.text
            if response.status_code == 200 and _pid_of(log, "redis", "restarted"):
                break
        served_after_s = time.monotonic() - killed_at
        assert answers[-1] == 200, (answers, log.read_text())
        assert served_after_s < 30
        restarted = _pid_of(log, "redis", "restarted")
        assert restarted and restarted != victim
        assert not os.path.exists(f"/proc/{victim}"), "the killed Redis was not reaped"
        assert f"redis (pid {victim}) was killed by SIGKILL: restarting it" in log.read_text()

        for s in streams:
            s.join(180)
            assert not s.is_alive(), "a stream did not end"
            assert s.lines and s.lines[-1][1] == "[DONE]", (s.failure, s.lines[-3:])
        watch.stop.set()
        watch.join(5)
        assert watch.banner is not None and watch.banner_at is not None
        assert watch.banner_at - killed_at < 5
        assert watch.banner["state"] == "restarting", watch.banner
        assert "SIGKILL" in watch.banner["last_exit"]
        # /healthz answered throughout (degraded while Redis was away, if it caught that)
        assert watch.health and watch.health[-1]["status"] == "ok", watch.health[-3:]
        down = [h for h in watch.health if h["status"] != "ok"]
        assert all(h["checks"]["redis"] is False for h in down), down

        def states() -> list[str]:
            out = subprocess.run(
                [*manage, "shell", "-c", ROWS], cwd=REPO, env=env, capture_output=True, text=True
            )
            assert out.returncode == 0, out.stderr
            return json.loads(out.stdout.strip().splitlines()[-1])

        _wait(lambda: "queued" not in states(), 30, "no queued generation rows", log)
        rows = states()
        assert "running" not in rows and rows.count("finished") >= 1, rows
        listing = api.get("/api/v1/processes").json()
        redis_child = next(p for p in listing["processes"] if p["name"] == "redis")
        assert redis_child["state"] == "running" and redis_child["restarts"] == 1, listing
        grown = log.stat().st_size - size_before
        assert grown < 64_000, f"the log grew {grown} bytes\n{log.read_text()[-5000:]}"
        print(
            f"served again {served_after_s:.1f}s after the kill; answers {answers}; log +{grown} B"
        )

        up.send_signal(signal.SIGINT)
        assert up.wait(timeout=90) == 0, log.read_text()
        assert not (data_dir / "redis" / "url").exists()
    finally:
        if up.poll() is None:
            up.send_signal(signal.SIGINT)
            try:
                up.wait(timeout=60)
            except subprocess.TimeoutExpired:
                up.kill()
