"""Through real parts: a real Celery worker of the train queue, on the test run's Redis and
database, trains the next draft version from captured traffic (a tiny target); killed in
the middle of the next training, it leaves the serving draft untouched and the version is
declared lost."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from fleet.audit.models import AuditEvent
from fleet.pipelines.models import Pipeline
from inference.learning import canary, services
from inference.learning.models import DraftStatus, DraftVersion
from inference.learning.selectors import canary_of
from inference.learning.tick import tick
from inference.training.learned_draft import draft_ready
from tests.learning.conftest import finished
from tests.pipelines.conftest import make_pipeline
from tests.training.test_online_draft import pairs_from
from tests.worker.helpers import database_url, write_pair

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
ROOT = Path(__file__).resolve().parents[2]


def start_worker(queue: str, data_dir: Path, log: Path) -> subprocess.Popen:
    argv = [sys.executable, "-m", "celery", "-A", "fleet", "worker", "--pool=solo"]
    argv += [f"--queues={queue}", f"--hostname={queue}@%h", "--without-gossip"]
    argv += ["--without-mingle", "--loglevel=INFO"]
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "TANDEM_DATA_DIR": str(data_dir),
        "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
    }
    out = open(log, "w")
    return subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
    )


def stop(proc: subprocess.Popen, sig=signal.SIGTERM) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        proc.wait(30)


def wait_for(cond, timeout: float, what: str, log: Path):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"{what} within {timeout} s; worker log:\n{log.read_text()[-4000:]}")


def snapshot(d: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


def test_a_real_train_worker_trains_a_candidate_and_a_killed_one_changes_nothing(
    transactional_db, tmp_path, settings, monkeypatch
):
    data = tmp_path / "data"
    settings.DATA_DIR, settings.MODEL_PATHS = data, []
    target, draft = write_pair(data / "models")
    serving = snapshot(draft)
    pipeline = make_pipeline(
        name="pair", target_model="target", draft_model="draft", drafter_kind="model"
    )
    queue = f"train-{uuid.uuid4().hex[:8]}"  # ours alone on the shared broker
    monkeypatch.setattr(services, "TRAIN_QUEUE", queue)
    services.learning_configure(
        pipeline_id=pipeline.pk,
        actor="alice",
        changes={"enabled": True, "min_pairs": 8, "train_minutes": 0.25},
    )
    soon = timezone.now() + timedelta(seconds=1)
    for prompt, output in pairs_from(target, n=12):
        g = finished(pipeline, at=soon, prompt=prompt)
        g.output_tokens = output
        g.save(update_fields=["output_tokens"])
    log = tmp_path / "train-worker.log"
    worker = start_worker(queue, data, log)
    try:
        report = tick(now=soon + timedelta(seconds=5))
        assert report["captured"] == 12 and report["started"] == [("pair", 1)]
        v1 = DraftVersion.objects.get(pipeline=pipeline, number=1)

        def decided():
            v1.refresh_from_db()
            return v1.status != DraftStatus.TRAINING

        wait_for(decided, 180, "draft v1 trained", log)
        assert v1.status == DraftStatus.CANDIDATE, (v1.detail, log.read_text()[-3000:])
        assert v1.detail["manifest"]["start"] == "draft" and v1.train_pairs > 0
        assert draft_ready(data / "models" / v1.path) and v1.heldout_agreement is not None
        assert canary_of(pipeline) == {
            "version": 1,
            "draft_model": "learned/pair-v1",
            "fraction": 0.2,
        }
        actions = set(AuditEvent.objects.filter(pipeline=pipeline).values_list("action", flat=True))
        assert {"learning", "draft_train", "draft_canary"} <= actions
        assert Pipeline.objects.get(pk=pipeline.pk).draft_model == "draft"  # not yet promoted

        # the next training, killed in the middle
        canary.reject(version_id=v1.pk, figures={}, why="make room for the next")
        v2 = services.training_start(pipeline_id=pipeline.pk, actor="alice")
        received = "Task tandem.learning.train["  # celery logs "... received" per task
        wait_for(
            lambda: log.read_text().count(received) >= 3,  # v1: received, succeeded; v2
            60,
            "the second training received",
            log,
        )
        stop(worker, signal.SIGKILL)
        v2.refresh_from_db()
        assert v2.status == DraftStatus.TRAINING
        assert not draft_ready(data / "models" / v2.path)
        assert snapshot(draft) == serving
        assert Pipeline.objects.get(pk=pipeline.pk).draft_model == "draft"
        assert services.training_lost(now=timezone.now() + timedelta(minutes=20)) == 1
        v2.refresh_from_db()
        assert v2.status == DraftStatus.FAILED and "lost" in v2.detail["error"]
        assert canary_of(pipeline) is None
    finally:
        stop(worker, signal.SIGKILL)
