"""Fixtures of the HTTP API tests: a tiny model directory (tokenizer + config only, no
weights: the web side never loads weights), a pipeline naming it, a healthy drafter/verifier
pair so the real router accepts generations, and a fake worker that writes a generation's
events to its real Redis stream."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from django.db import connection
from django.utils import timezone
from tokenizers import AddedToken

from fleet.nodes.models import HardwareProfile, Node
from fleet.pipelines.models import Pipeline, Placement, PlacementRole
from fleet.testing.ports import free_port
from inference import services, wire
from inference.selectors import stream_owner
from inference.training.byte_tokenizer import build_byte_tokenizer

CONTEXT = 64
ROOT = Path(__file__).resolve().parents[2]


def write_model_dir(path, *, context: int = CONTEXT, chatml: bool = False):
    tok = build_byte_tokenizer()
    if chatml:
        tok.add_special_tokens(
            [AddedToken(t, special=True, normalized=False) for t in ("<|im_start|>", "<|im_end|>")]
        )
    path.mkdir(parents=True, exist_ok=True)
    tok.save(str(path / "tokenizer.json"))
    config = {"model_type": "llama", "max_position_embeddings": context, "vocab_size": 261}
    (path / "config.json").write_text(json.dumps(config))
    return path


@pytest.fixture
def model_path(tmp_path):
    return write_model_dir(tmp_path / "byte-demo")


@pytest.fixture
def pipeline(db, model_path):
    return Pipeline.objects.create(name="demo", target_model=str(model_path), draft_model="x")


def place_pair(pipeline, prefix: str = "api") -> tuple[Node, Node]:
    """An online, freshly heartbeating drafter and verifier placed in `pipeline`."""
    profile, _ = HardwareProfile.objects.get_or_create(
        slug="api-test-cpu",
        defaults=dict(
            kind="cpu",
            vendor="test",
            model="cpu",
            memory_gb=1,
            memory_bandwidth_gbs=1,
            peak_bf16_tflops=1,
            tdp_w=10,
            idle_w=1,
        ),
    )
    nodes = []
    for role in (PlacementRole.DRAFT, PlacementRole.VERIFY):
        node = Node.objects.create(
            name=f"{prefix}-{role}",
            profile=profile,
            roles=[role],
            state="online",
            last_seen=timezone.now(),
        )
        Placement.objects.create(pipeline=pipeline, node=node, role=role)
        nodes.append(node)
    return nodes[0], nodes[1]


@pytest.fixture
def serving(pipeline):
    """The pipeline, with a pair the router will pick."""
    place_pair(pipeline)
    return pipeline


def script(text: str, *, finish_reason: str = "stop", prompt_tokens: int = 0, chunk: int = 3):
    """The events a worker would write for `text` (byte-level: one token per byte)."""
    data = text.encode()
    events: list[wire.Event] = []
    n = 0
    for i in range(0, len(data), chunk):
        piece = data[i : i + chunk]
        n += len(piece)
        events.append(wire.tokens_event(list(piece), piece.decode(), n))
    events.append(wire.done_event(finish_reason, prompt_tokens, n))
    return events


@pytest.fixture
def fake_worker(monkeypatch):
    """Replaces nothing but the workers: the real `generation_submit` writes the row; then a
    thread writes `worker.events` (default: "Hello, world!" and done; a callable gives each
    generation its own) to the real stream,
    `worker.delay_s` apart. `worker.submitted` lists the generations."""

    class Worker:
        events: list | None = None
        delay_s = 0.0
        submitted: list = []
        threads: list = []

    worker = Worker()
    worker.submitted, worker.threads = [], []
    real_submit = services.generation_submit

    def submit(**kwargs):
        generation = real_submit(**kwargs)
        events = worker.events or script(
            "Hello, world!", prompt_tokens=len(kwargs["prompt_tokens"])
        )
        if callable(events):  # events(kwargs, k): the k-th generation's own
            events = events(kwargs, len(worker.submitted))
        worker.submitted.append(generation)

        def run():
            for event in events:
                if worker.delay_s:
                    time.sleep(worker.delay_s)
                wire.publish(generation.id, event, node=stream_owner(generation.id))

        if worker.delay_s:
            thread = threading.Thread(target=run, daemon=True)
            thread.start()
            worker.threads.append(thread)
        else:
            run()
        return generation

    monkeypatch.setattr(services, "generation_submit", submit)
    yield worker
    for thread in worker.threads:
        thread.join(timeout=10)


class DaphneURL(str):
    """The server's base URL; `.log()` is what the server printed (for failure messages)."""

    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text()[-5000:]


def database_url() -> str:
    """This test run's database, for a server subprocess."""
    s = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{s['NAME']}"
    return (
        f"postgres://{s['USER']}:{s['PASSWORD']}@{s['HOST'] or 'localhost'}:{s['PORT'] or 5432}"
        f"/{s['NAME']}"
    )


@pytest.fixture
def daphne_url(transactional_db, tmp_path):
    """The production ASGI server (`fleet.runtime.web_serve`: uvicorn; the fixture's name is
    older), in a subprocess on the test database and Redis."""
    port = free_port()
    env = {**os.environ, "DATABASE_URL": database_url(), "DJANGO_SETTINGS_MODULE": "fleet.settings"}
    log_path = tmp_path / "daphne.log"
    argv = [
        sys.executable,
        "-m",
        "fleet.runtime.web_serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = DaphneURL(f"http://127.0.0.1:{port}")
    url.log_path = log_path
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, f"daphne exited:\n{log_path.read_text()}"
            assert time.monotonic() < deadline, f"daphne did not start:\n{log_path.read_text()}"
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
