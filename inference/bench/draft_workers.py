"""``bench_draft``'s figures through the real workers: the learned draft of a target served as
`up` serves it (web server, ledger, one drafter and one verifier ``run_node`` worker, its own
Redis and database: ``stack``), clients on ``/v1/completions``.

For 1 and 8 concurrent streams, the held-out prompts of the draft prompt set (each one user
turn in the target's chat template, greedy, answers ending where the target ends them) are
run under each configuration in turn, the same prompts for every configuration of a
repetition: plain decoding (fixed k 0), the learned draft at fixed k, adaptive k over the
learned draft, and the n-gram drafter at fixed k (the drafter swaps its draft live, as an
operator's change does). Figures, from what the product itself recorded:

- tokens/s per configuration (the clients' count over the run's wall time), and the ratios to
  plain decoding at 1 and 8 streams;
- acceptance per token (`draft.alpha`) from the finished generations' counters (vLLM's names,
  the ledger's rows) of the fixed-k runs;
- greedy identity: every generation's output tokens against plain decoding's for its prompt.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .control import ADAPTIVE
from .control_figures import counters_of, k_rounds
from .draft import alpha
from .serving import bench_key
from .serving_clients import drive
from .stack import Stack, free_port, spawn_node, wait_for, wait_rows


def configurations(k: int) -> dict[str, tuple[str, dict]]:
    """name -> (drafter kind, k policy); the drafter's kind changes last in a repetition, so a
    repetition swaps the draft twice (to the n-gram drafter and back)."""
    return {
        "plain": ("model", {"mode": "fixed", "k": 0}),
        "learned": ("model", {"mode": "fixed", "k": k}),
        "adaptive": ("model", dict(ADAPTIVE)),
        "ngram": ("ngram", {"mode": "fixed", "k": k}),
    }


PLANS: dict[str, dict[str, Any]] = {
    "full": {"prompts": 16, "max_tokens": 64, "reps": 2, "streams": (1, 8)},
    "quick": {"prompts": 8, "max_tokens": 48, "reps": 1, "streams": (1, 8)},
    "smoke": {"prompts": 2, "max_tokens": 8, "reps": 1, "streams": (2,)},
}


def identical_to_plain(outputs: dict[str, dict[int, list[list[int]]]]) -> dict[str, Any]:
    """outputs: configuration -> prompt index -> every output it gave that prompt. True for
    a configuration when each of its outputs equals plain decoding's for the same prompt."""
    plain = outputs.get("plain", {})
    per_config, mismatched = {}, []
    for name, by_prompt in outputs.items():
        ok = True
        for i, outs in by_prompt.items():
            reference = plain.get(i, [None])[0]
            for out in outs:
                if reference is not None and out != reference:
                    ok = False
                    mismatched.append({"configuration": name, "prompt": i})
        per_config[name] = ok
    return {
        "all": all(per_config.values()),
        "per_configuration": per_config,
        "mismatched": mismatched,
    }


def bench_workers(
    *, target: Path, draft: Path, plan: str = "full", k: int = 4, log: Callable = print
) -> dict[str, Any]:
    from fleet.nodes.models import HardwareProfile
    from fleet.nodes.services import node_register
    from fleet.pipelines.models import Pipeline, Placement
    from inference.local_pipelines import PIPELINES
    from inference.text.tokenizer import Tokenizer
    from inference.training import draft_data

    how = PLANS[plan]
    key = bench_key()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    stack = Stack(log)
    configs = configurations(k)
    try:
        stack.spawn(
            "web",
            [sys.executable, "-m", "fleet.runtime.web_serve", "--host", "127.0.0.1"]
            + ["--port", str(port)],
        )
        stack.spawn("ledger", [sys.executable, "manage.py", "run_ledger"])
        pipeline = Pipeline.objects.create(
            name="bench-draft",
            target_model=str(target),
            draft_model=str(draft),
            drafter_kind="model",
            k_policy=configs["plain"][1],
            max_verify_batch=32,
            max_batch_wait_ms=20,
        )
        profile = HardwareProfile.objects.filter(kind="cpu").first()
        if profile is None:
            raise RuntimeError("no CPU hardware profile: the catalogue migration did not run")
        nodes = {}
        for role in ("draft", "verify"):
            node, token = node_register(name=f"bench-draft-{role}", profile=profile, roles=[role])
            Placement.objects.create(pipeline=pipeline, node=node, role=role)
            nodes[role] = (node, token)
            env = {"TANDEM_NODE_SLOTS": "8", **PIPELINES["smollm2"].worker_env}
            spawn_node(stack, f"smollm2-{role}", role, node, token, base, env)

        node_ids = [node.pk for node, _ in nodes.values()]

        def online() -> bool:
            from fleet.nodes.models import Node

            return Node.objects.filter(pk__in=node_ids, state="online").count() == 2

        wait_for(online, 300, "the workers to come online", stack)
        tok = Tokenizer.from_dir(target)
        _, held = draft_data.split(draft_data.load_prompts())
        texts = [
            tok.chat_prompt([{"role": "user", "content": r["prompt"]}])
            for r in held[: how["prompts"]]
        ]
        return _measure(pipeline, nodes, base, key, texts, configs, how, stack, log) | {
            "measured": "through the real workers (web, ledger, run_node drafter + verifier, "
            "Redis), clients on /v1/completions",
            "k": k,
            "heldout_prompts": len(texts),
            "max_tokens": how["max_tokens"],
            "load_average": os.getloadavg()[0],
        }
    finally:
        stack.close()


def _configure(pipeline, kind: str, policy: dict, base: str, key: str) -> None:
    """Push a configuration and wait out its first request (a draft swap loads the model)."""
    from inference.services import push_pipeline_config

    type(pipeline).objects.filter(pk=pipeline.pk).update(drafter_kind=kind, k_policy=policy)
    pipeline.refresh_from_db()
    push_pipeline_config(pipeline)
    time.sleep(0.3)
    drive(
        base=base,
        key=key,
        prompts_per_client=[["Hello"]],
        max_tokens=4,
        api="openai",
        params={"model": pipeline.name},
    )


def _measure(pipeline, nodes, base, key, texts, configs, how, stack, log) -> dict[str, Any]:
    from inference.models import Generation
    from inference.selectors import node_inspect

    tps: dict[int, dict[str, list[float]]] = {}
    adaptive_ks: dict[int, dict[int, int]] = {}  # streams -> k -> adaptive's rounds at it
    decided: dict[int, dict] = {}  # streams -> adaptive's k by batch, and its acceptance
    outputs: dict[str, dict[int, list[list[int]]]] = {name: {} for name in configs}
    counters: dict[str, list[dict]] = {name: [] for name in configs}
    index = {text: i for i, text in enumerate(texts)}
    for n in how["streams"]:
        tps[n] = {name: [] for name in configs}
        # prompt i goes to client i % n: every configuration runs the same prompts the same way
        per_client = [[j for j in range(len(texts)) if j % n == c] for c in range(n)]
        for _ in range(how["reps"]):
            for name, (kind, policy) in configs.items():
                _configure(pipeline, kind, policy, base, key)
                began = time.time()
                r = drive(
                    base=base,
                    key=key,
                    prompts_per_client=[[texts[j] for j in js] for js in per_client],
                    max_tokens=how["max_tokens"],
                    api="openai",
                    params={"model": pipeline.name},
                )
                tps[n][name].append(r["tokens_per_s"])
                wait_rows(r["ids"], stack)
                # drive's records are in completion order per client; map back by prompt text
                for g in Generation.objects.filter(pk__in=r["ids"]):
                    i = index.get(g.prompt, -1)
                    outputs[name].setdefault(i, []).append(list(g.output_tokens))
                    counters[name].append(g.counters or {})
                if name == "adaptive":
                    hist = adaptive_ks.setdefault(n, {})
                    for k_used, rounds in k_rounds(nodes, began).items():
                        hist[k_used] = hist.get(k_used, 0) + rounds
                    snap = (node_inspect(nodes["draft"][0].pk) or {}).get("adaptive") or {}
                    decided[n] = {  # what it decided from: its acceptance and cost tables
                        "k_by_bucket": snap.get("k_by_bucket"),
                        "per_position": (snap.get("acceptance") or {}).get("per_position"),
                        **{c: snap.get(c) for c in ("draft_costs", "verify_costs", "rest_costs")},
                    }
                log(f"  N={n} {name:8s} {r['tokens_per_s']:.1f} tok/s")
    mean = {n: {name: sum(v) / len(v) for name, v in c.items()} for n, c in tps.items()}
    greedy = identical_to_plain(outputs)

    def ratio(n: int, name: str) -> float | None:
        m = mean.get(n)
        return round(m[name] / m["plain"], 3) if m and m["plain"] else None

    return {
        "tokens_per_s": {str(n): {k: round(v, 2) for k, v in m.items()} for n, m in mean.items()},
        "alpha_learned": round(alpha(counters_of(counters["learned"])), 4),
        "alpha_ngram": round(alpha(counters_of(counters["ngram"])), 4),
        "spec_vs_plain_b1": ratio(1, "learned"),
        "adaptive_vs_plain_b1": ratio(1, "adaptive"),
        "ngram_vs_plain_b1": ratio(1, "ngram"),
        "spec_vs_plain_b8": ratio(8, "learned"),
        "adaptive_vs_plain_b8": ratio(8, "adaptive"),
        "ngram_vs_plain_b8": ratio(8, "ngram"),
        "adaptive_k_rounds": {str(n): dict(sorted(h.items())) for n, h in adaptive_ks.items()},
        "adaptive_state": {str(n): d for n, d in decided.items()},
        "greedy_identical": greedy["all"],
        "greedy_identical_per_configuration": greedy["per_configuration"],
        "greedy_mismatched": greedy["mismatched"],
    }
