"""`manage.py up` with the demo pipeline, 4 OpenAI streams, SIGKILL of the verifier: the
streams move to a second verifier (started here) and finish with the text an undisturbed run
gives; then SIGKILL of the only drafter: its verifier finishes its streams alone (plain
decoding), with the same text. `/healthz` answers throughout, and `up` brings each killed
worker back.

The demo pair is a tiny random one written into the data directory before `up` starts, so
`run_node --demo` finds it and trains nothing; its end-of-sequence logit is pinned to zero
so greedy streams run to max_tokens."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import torch

from inference.engine.checkpoints import save_checkpoint
from inference.text.tokenizer import Tokenizer
from inference.training import byte_tokenizer as bt
from inference.training.demo_pair import DRAFT_NAME, MANIFEST, TARGET_NAME
from tests.foundation.helpers import REPO, free_port
from tests.worker.helpers import tiny_model

pytestmark = [pytest.mark.slow, pytest.mark.timeout(480)]

CONTEXT = 2048
MAX_TOKENS = 1500
PROMPTS = [[256, *b"def f%d(x):" % i] for i in range(4)]

SETUP = """
import json, time
from fleet.accounts.services import api_key_create, user_set_role
from django.contrib.auth import get_user_model
from fleet.nodes.models import Node
from fleet.nodes.services import node_register
from fleet.pipelines.services import node_drain
from fleet.pipelines.models import Pipeline, Placement
deadline = time.monotonic() + 240
while Node.objects.filter(name__in=["demo-draft", "demo-verify"], state="online").count() < 2:
    assert time.monotonic() < deadline, "the demo nodes did not come online"
    time.sleep(0.3)
user = get_user_model().objects.create_user(username="e2e", password=None)
user_set_role(user=user, role="admin")
verifier = Node.objects.get(name="demo-verify")
node, token = node_register(name="demo-verify-2", profile=verifier.profile, roles=["verify"])
Placement.objects.create(pipeline=Pipeline.objects.get(name="demo"), node=node, role="verify")
node_drain(node_id=node.pk, actor=user)  # no work until the test returns it, once streams run
print(json.dumps({"key": api_key_create(user=user, name="e2e")[1], "node": node.pk,
                  "token": token}))
"""


def _write_demo_pair(models: Path) -> None:
    tok = Tokenizer(bt.build_byte_tokenizer(), bos_token=bt.BOS, eos_token=bt.EOS)
    target, draft = tiny_model(0, context=CONTEXT), tiny_model(0, context=CONTEXT)
    with torch.no_grad():
        gen = torch.Generator().manual_seed(7)
        for p in draft.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.05 * p.std())
        for model in (target, draft):
            model.lm_head.weight[bt.EOS_ID] = 0.0  # greedy never picks it: full-length streams
    save_checkpoint(target, tok, models / TARGET_NAME)
    save_checkpoint(draft, tok, models / DRAFT_NAME)
    (models / MANIFEST).write_text(json.dumps({"note": "tiny random pair for tests"}))


class Stream(threading.Thread):
    """One streamed completion; `lines` are (monotonic time, `data:` payload)."""

    def __init__(self, base: str, key: str, prompt: list[int]):
        super().__init__(daemon=True)
        self.base, self.key, self.prompt = base, key, prompt
        self.lines: list[tuple[float, str]] = []
        self.failure: BaseException | None = None

    def run(self):
        body = {
            "model": "demo",
            "prompt": self.prompt,
            "max_tokens": MAX_TOKENS,
            "temperature": 0,
            "stream": True,
        }
        headers = {"Authorization": f"Bearer {self.key}"}
        try:
            with httpx.stream(
                "POST", f"{self.base}/v1/completions", json=body, headers=headers, timeout=120
            ) as response:
                assert response.status_code == 200, response.read()
                for line in response.iter_lines():
                    if line.startswith("data: "):
                        self.lines.append((time.monotonic(), line[6:]))
        except BaseException as exc:  # reported by the test
            self.failure = exc

    def chunks(self) -> list[dict]:
        return [json.loads(d) for _, d in self.lines if d != "[DONE]"]

    def text(self) -> str:
        return "".join(c["choices"][0]["text"] for c in self.chunks() if "choices" in c)

    def errors(self) -> list[dict]:
        return [c["error"] for c in self.chunks() if "error" in c]


class Health(threading.Thread):
    """Polls /healthz until stopped; `bad` collects every answer that was not 200."""

    def __init__(self, base: str):
        super().__init__(daemon=True)
        self.base, self.stop, self.polls = base, threading.Event(), 0
        self.bad: list[int | str] = []

    def run(self):
        while not self.stop.is_set():
            status: int | str
            try:
                status = httpx.get(f"{self.base}/healthz", timeout=3).status_code
            except httpx.HTTPError as exc:
                status = repr(exc)
            self.polls += 1
            if status != 200:
                self.bad.append(status)
            self.stop.wait(0.2)


def _wait(condition, timeout_s: float, what: str, log: Path) -> float:
    start = deadline = time.monotonic()
    deadline += timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what} not within {timeout_s}s\n{log.read_text()}"
        time.sleep(0.1)
    return time.monotonic() - start


def _pid_of(log: Path, name: str, verb: str = "started") -> int | None:
    found = re.findall(rf"{verb} {name} +pid (\d+)", log.read_text())
    return int(found[-1]) if found else None


def demo_up(tmp_path: Path) -> tuple[dict, str, Path]:
    """What `manage.py up` needs to serve the demo pair alone in `tmp_path`: its environment,
    its base URL and its log file."""
    data_dir = tmp_path / "data"
    (data_dir / "models").mkdir(parents=True)
    _write_demo_pair(data_dir / "models")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
    env.update(
        TANDEM_DATA_DIR=str(data_dir),
        TANDEM_PORT=str(port),
        TANDEM_SIMULATOR="0",
        TANDEM_DEFAULT_PIPELINES="demo",
        PYTHONUNBUFFERED="1",
        TANDEM_NODE_SLOTS="8",
    )
    base, log = f"http://127.0.0.1:{port}", tmp_path / "up.log"
    return env, base, log


def test_up_survives_killed_node_workers(tmp_path):
    env, base, log = demo_up(tmp_path)
    with log.open("w") as out:
        up = subprocess.Popen(
            [sys.executable, "manage.py", "up"],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    second = None
    health = Health(base)
    try:
        _wait(
            lambda: "Press Ctrl-C to stop." in log.read_text() or up.poll() is not None,
            240,
            "up ready",
            log,
        )
        assert up.poll() is None, log.read_text()
        health.start()
        setup = subprocess.run(
            [sys.executable, "manage.py", "shell", "-c", SETUP],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert setup.returncode == 0, setup.stderr + log.read_text()
        info = json.loads(setup.stdout.strip().splitlines()[-1])
        key, api = (
            info["key"],
            httpx.Client(
                base_url=base, headers={"Authorization": f"Bearer {info['key']}"}, timeout=10
            ),
        )
        with (tmp_path / "verify-2.log").open("w") as out:
            second = subprocess.Popen(
                [sys.executable, "manage.py", "run_node", "--role", "verify"],
                cwd=REPO,
                env={
                    **env,
                    "TANDEM_NODE_ID": str(info["node"]),
                    "TANDEM_NODE_TOKEN": info["token"],
                    "TANDEM_API_URL": base,
                    "OMP_NUM_THREADS": "1",
                },
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

        def node(name_or_id):
            if isinstance(name_or_id, int):
                return api.get(f"/api/v1/nodes/{name_or_id}").json()
            found = api.get("/api/v1/nodes", params={"search": name_or_id}).json()["results"]
            return next(n for n in found if n["name"] == name_or_id)

        _wait(lambda: node(info["node"])["last_seen"], 120, "the second verifier", log)

        # 1. Kill the verifier mid-stream: the streams move to the second one.
        streams = [Stream(base, key, p) for p in PROMPTS]
        for s in streams:
            s.start()
        _wait(lambda: all(len(s.lines) >= 3 for s in streams), 120, "4 streams flowing", log)
        assert api.post(f"/api/v1/nodes/{info['node']}/return").status_code == 200
        victim = _pid_of(log, "node-demo-verify")
        assert victim is not None, "no node-demo-verify in the log"
        os.killpg(victim, signal.SIGKILL)
        killed_at = time.monotonic()
        _wait(
            lambda: (
                (_pid_of(log, "node-demo-verify", "restarted") or 0) != 0
                and node("demo-verify")["state"] == "online"
            ),
            30 - (time.monotonic() - killed_at),
            "node-demo-verify back within 30 s",
            log,
        )
        for s in streams:
            s.join(180)
            assert not s.is_alive() and s.failure is None, (s.failure, log.read_text())
        for s in streams:
            after = [t for t, _ in s.lines if t > killed_at]
            assert after and after[0] - killed_at < 5, "no word within 5 s of the kill"
            assert s.lines[-1][1] == "[DONE]" and not s.errors(), s.errors()
            assert s.chunks()[-1]["choices"][0]["finish_reason"] == "length"

        # the text an undisturbed run gives (same prompts, greedy, the pipeline healthy again)
        undisturbed = []
        for s in streams:
            body = {"model": "demo", "prompt": s.prompt, "max_tokens": MAX_TOKENS, "temperature": 0}
            answer = api.post("/v1/completions", json=body, timeout=120).json()
            assert answer["choices"][0]["text"] == s.text()
            undisturbed.append(s.text())

        # 2. Kill the only drafter mid-stream: the verifier finishes the streams alone, by
        # plain decoding -- no error, the same text.
        assert api.post(f"/api/v1/nodes/{info['node']}/drain").status_code == 200
        streams = [Stream(base, key, p) for p in PROMPTS[:2]]
        for s in streams:
            s.start()
        _wait(lambda: all(len(s.lines) >= 3 for s in streams), 120, "2 streams flowing", log)
        drafter = _pid_of(log, "node-demo-draft")
        assert drafter is not None, "no node-demo-draft in the log"
        os.killpg(drafter, signal.SIGKILL)
        for s, want in zip(streams, undisturbed, strict=False):
            s.join(180)
            assert not s.is_alive() and s.failure is None, (s.failure, log.read_text())
            assert s.lines[-1][1] == "[DONE]" and not s.errors(), s.errors()
            assert s.chunks()[-1]["choices"][0]["finish_reason"] == "length"
            assert s.text() == want
        assert "finished by their verifier alone" in log.read_text()
        _wait(lambda: _pid_of(log, "node-demo-draft", "restarted"), 30, "node-demo-draft back", log)

        health.stop.set()
        health.join(5)
        assert health.polls > 20 and health.bad == [], health.bad
        listing = api.get("/api/v1/processes").json()
        restarted = {p["name"]: p["restarts"] for p in listing["processes"]}
        assert restarted["node-demo-verify"] == 1 and restarted["node-demo-draft"] == 1, listing
        rows = api.get("/api/v1/generations", params={"limit": 100}).json()["results"]
        assert not [g for g in rows if g["state"] in ("queued", "running")]

        up.send_signal(signal.SIGINT)
        assert up.wait(timeout=90) == 0, log.read_text()
    finally:
        health.stop.set()
        if second is not None and second.poll() is None:
            os.killpg(second.pid, signal.SIGKILL)
            second.wait(10)
        if up.poll() is None:
            up.send_signal(signal.SIGINT)
            try:
                up.wait(timeout=60)
            except subprocess.TimeoutExpired:
                up.kill()
