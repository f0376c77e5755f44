"""The local `train` worker as a child of `manage.py up` (fleet/launcher.py CHILD_FACTORIES):
a Celery worker of the `train` queue, one task at a time, where draft versions are trained
(`tandem.learning.train`). It imports torch only when a training starts. Off with
TANDEM_TRAIN_WORKER=0 (e.g. when another machine holds the `train` role)."""

from __future__ import annotations

import sys

from fleet.env import env_bool
from fleet.runtime.children import ChildSpec

TRAIN_QUEUE = "train"  # the queue draft versions are trained on


def train_worker_children(settings) -> list[ChildSpec]:
    if not env_bool("TANDEM_TRAIN_WORKER", True):
        return []
    argv = [sys.executable, "-m", "celery", "-A", "fleet", "--quiet", "worker"]
    argv += ["--pool=solo", f"--queues={TRAIN_QUEUE}", f"--hostname={TRAIN_QUEUE}@%h"]
    argv += ["--without-gossip", "--without-mingle", "--loglevel=INFO"]
    return [ChildSpec(name="train-worker", argv=argv, stop_timeout_s=15.0)]
