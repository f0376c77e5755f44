"""bench_control: does speculation control hold up, measured through the real workers?

In a throw-away data directory (as bench_serving: its own Redis and SQLite), the web server,
the ledger, the telemetry aggregator and, for each of `up`'s two pipelines, one drafter + one
verifier `run_node` worker serve clients over the REST API: ``demo`` (the demo pair) and
``smollm2`` (SmolLM2-135M-Instruct with the n-gram drafter). For 1 and 8 concurrent streams
and two phases -- demo: its own domain (Python source lines, greedy), then random characters
sampled hot (LOW_PARAMS); smollm2: code prompts, then prose (the shipped draft prompts) -- it
measures every fixed k in the sweep and adaptive k, each twice, interleaved; then adaptive over
phase 1 followed at once by phase 2 (so the drafter must re-settle), all in this one run.
A run's tokens/s is counted while all of its clients are in flight (`steady_rate`; its
wall-clock rate is beside it): the clients' equal requests, started together, end together,
and the tail of the slowest ones finishing alone is chance, not the k being measured.
Figures per cell are keyed `<pipeline>_n<streams>_<phase>`; the headline ones are the worst
over both pipelines:

- adaptive_vs_best_fixed_min: adaptive goodput / the best fixed k of that phase (min over
  phases x streams);
- adaptive_vs_plain_min: adaptive / k = 0 (same cells);
- adapt_rounds: rounds after the phase switch until adaptive k settles among the k worth
  within 5 % of the new phase's best fixed k (its drafter's trace; `control_figures`);
- planner_apply_error_max_pct: the planner's goodput model, fed by what the nodes measured
  (their cost tables, the acceptance), predicts each fixed k; the recommended k's prediction
  against its measured run; and 20 random simulated fleets through the planner's telemetry
  path against the simulator's physics at the recommended configuration;
- sim_vs_real_cpu_error_pct: the simulator's roofline for this machine's CPU profile against
  the real pipeline's measured goodput per k (how far physics from a profile sheet gets);
- bad_apply_rollback_s: under traffic at high acceptance, k = 0 is applied through the API;
  seconds until the automatic rollback is audited (`fleet.planner.verification`, the beat
  task's function, called here every second).
"""

from __future__ import annotations

import json
import random
import string
import sys
import threading
import time
from pathlib import Path
from typing import Any

from inference.training.draft_data import PROMPTS_FILE as DRAFT_PROMPTS

from .control_figures import (
    held_out_best,
    k_rounds,
    per_position,
    per_position_of_rows,
    round_batches,
    settle_rounds,
    settle_rounds_among,
    worthy_ks,
)
from .control_planner import planner_errors, simulated_errors
from .serving import _prompts, bench_key
from .serving_clients import drive
from .stack import Stack, free_port, spawn_node, wait_for, wait_rows

ADAPTIVE = {"mode": "adaptive", "k_min": 0, "k_max": 8, "k": 4}


# The low-acceptance phase: prompts the pair never saw, sampled hot (the draft's and the
# target's distributions part where they are flat; greedy, the demo pair agrees on almost
# anything it continues, random characters included).
LOW_PARAMS = {"temperature": 1.6, "top_p": 1.0}


def _low_prompts(n: int = 64) -> list[str]:
    rng = random.Random(7)
    alphabet = string.ascii_letters + string.digits + string.punctuation + " "
    return ["".join(rng.choice(alphabet) for _ in range(40)) for _ in range(n)]


def _set_policy(pipeline, policy: dict) -> None:
    from fleet.pipelines.models import Pipeline
    from inference.services import push_pipeline_config

    Pipeline.objects.filter(pk=pipeline.pk).update(k_policy=policy)
    pipeline.refresh_from_db()
    push_pipeline_config(pipeline)
    time.sleep(0.3)


def _draw(phase, n, requests, rng) -> list[list[str]]:
    """The prompts of one run: `requests` for each of n clients."""
    return [[rng.choice(phase[0]) for _ in range(requests)] for _ in range(n)]


def _run(base, key, phase, n, requests, max_tokens, rng, prompts=None) -> dict:
    """One run of n clients; `prompts` (from `_draw`) to run the same ones as another run."""
    prompts = prompts or _draw(phase, n, requests, rng)
    params = phase[1]
    r = drive(base=base, key=key, prompts_per_client=prompts, max_tokens=max_tokens, params=params)
    # while all n clients are in flight (`steady_rate`): the goodput at n streams the
    # planner predicts, without the run's tail of the slowest clients finishing alone
    return {
        "tokens_per_s": r["steady_tokens_per_s"] or r["tokens_per_s"],
        "wall_tokens_per_s": r["tokens_per_s"],
        "ids": r["ids"],
        "wall_s": r["wall_s"],
    }


def _phases(name: str) -> dict[str, tuple[list[str], dict]]:
    """Two workloads pipeline `name` meets one after the other: {phase: (prompts, the
    request's parameters over greedy, its pipeline included)}."""
    to = {"pipeline": f"bench-{name}"}
    if name == "demo":
        # the pair's own domain (greedy), then random characters sampled hot
        return {"high": (_prompts(), to), "low": (_low_prompts(), {**LOW_PARAMS, **to})}
    prompts: dict[str, list[str]] = {}
    for line in DRAFT_PROMPTS.read_text().splitlines():
        row = json.loads(line)
        prompts.setdefault(row["domain"], []).append(row["prompt"])
    # SmolLM2 with the n-gram drafter: code (which repeats its own names), then prose; every
    # request runs to max_tokens (ignore_eos): SmolLM2 ends most of these prompts' answers
    # within ~7 tokens, and such runs measured request overheads and chance overlaps (verify
    # batches of 1-3 at 8 streams), not the k they were meant to compare
    full = {**to, "ignore_eos": True}
    return {"code": (prompts["code"], full), "prose": (prompts["prose"], full)}


def _add_pipeline(name: str, models: Path, profile) -> tuple[Any, dict, dict[str, str]]:
    """A pipeline `name` as `up` serves it (its models, drafter, worker settings), with a
    drafter and a verifier node: (pipeline, {role: (node, token)}, worker env)."""
    from fleet.nodes.services import node_register
    from fleet.pipelines.models import Pipeline, Placement
    from inference.local_pipelines import PIPELINES
    from inference.worker.local import PREPARE

    spec = PIPELINES[name]
    is_prepared, prepare = PREPARE[name]
    if not is_prepared(models):
        prepare(models, print)
    pipeline = Pipeline.objects.create(
        name=f"bench-{name}",
        target_model=str(models / spec.target_model),
        draft_model=str(models / spec.draft_model) if spec.draft_model else "",
        drafter_kind=spec.drafter_kind,
        k_policy={"mode": "fixed", "k": 4},
        max_verify_batch=32,
        max_batch_wait_ms=20,
    )
    nodes = {}
    for role in ("draft", "verify"):
        node, token = node_register(name=f"bench-{name}-{role}", profile=profile, roles=[role])
        Placement.objects.create(pipeline=pipeline, node=node, role=role)
        nodes[role] = (node, token)
    return pipeline, nodes, {"TANDEM_NODE_SLOTS": "16", **spec.worker_env}


# How much each run measures: the full sweep, --quick, and --smoke (the harness end to end in
# a minute or two, for its test: its figures mean nothing).
PLANS: dict[str, dict[str, Any]] = {
    "full": {"ks": list(range(9)), "reps": 2, "requests": 3, "max_tokens": 64, "streams": (1, 8)},
    "quick": {"ks": [0, 1, 2, 4, 8], "reps": 2, "requests": 2, "max_tokens": 48, "streams": (1, 8)},
    "smoke": {"ks": [0, 2], "reps": 1, "requests": 1, "max_tokens": 8, "streams": (2,)},
}


def bench(*, models: Path, plan: str, log=print, pipelines=("demo", "smollm2")) -> dict:
    from fleet.audit.models import AuditEvent
    from fleet.nodes.models import HardwareProfile
    from inference.selectors import node_inspect

    how = PLANS[plan]
    key = bench_key()
    profile = HardwareProfile.objects.filter(kind="cpu").first()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    stack = Stack(log)
    report: dict[str, Any] = {"config": {"plan": plan, **how}}
    try:
        stack.spawn(
            "web",
            [
                sys.executable,
                "-m",
                "fleet.runtime.web_serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
        )
        stack.spawn("ledger", [sys.executable, "manage.py", "run_ledger"])
        stack.spawn("aggregator", [sys.executable, "manage.py", "run_aggregator"])
        served: dict[str, tuple[Any, dict]] = {}
        for name in pipelines:
            try:
                pipeline, nodes, env = _add_pipeline(name, models, profile)
            except Exception as exc:  # e.g. smollm2's weights package missing: say so, go on
                log(f"{name}: not benchmarked ({exc.__class__.__name__}: {exc})")
                report[f"{name}_skipped"] = str(exc)
                continue
            served[name] = (pipeline, nodes)
            for role, (node, token) in nodes.items():
                spawn_node(stack, f"{name}-{role}", role, node, token, base, env)

        def online():
            from fleet.nodes.models import Node

            return Node.objects.filter(state="online").count() == 2 * len(served)

        wait_for(online, 300, "the workers to come online", stack)
        vs_best, vs_plain, adapt_rounds, errors = [], [], [], []
        vs_held_out: list[float] = []
        repeat: list[float] = []
        for name, (pipeline, nodes) in served.items():
            cells, settled = _measure(name, pipeline, nodes, base, key, how, stack, log)
            adapt_rounds += settled
            for (n, phase), c in cells.items():
                best_k = max(c["fixed"], key=lambda k: c["fixed"][k])
                best = c["fixed"][best_k]
                vs_best.append(c["adaptive"] / best)
                if c.get("best_fixed_held_out"):
                    vs_held_out.append(c["adaptive"] / c["best_fixed_held_out"])
                vs_plain.append(c["adaptive"] / c["fixed"][0])
                # the machine's noise beside those ratios: how far the best fixed k's own
                # repetitions (same prompts, same configuration) fell from each other
                top = c["runs"][best_k]
                if len(top) > 1 and max(top) > 0:
                    repeat.append(min(top) / max(top))
                report[f"{name}_n{n}_{phase}"] = {
                    "fixed_tokens_per_s": {str(k): round(v, 1) for k, v in c["fixed"].items()},
                    "best_fixed_k": best_k,
                    "adaptive_tokens_per_s": round(c["adaptive"], 1),
                    "adaptive_k_final": c.get("adaptive_k_final"),
                    "adaptive_vs_best_fixed": round(c["adaptive"] / best, 3),
                    "best_fixed_held_out_tokens_per_s": c.get("best_fixed_held_out"),
                    "adaptive_vs_plain": round(c["adaptive"] / c["fixed"][0], 3),
                    "drafter_batch_mean": {str(k): v for k, v in c["drafter_batch_mean"].items()},
                    "adaptive_k_rounds": {str(k): v for k, v in c["adaptive_k_rounds"].items()},
                    "runs_tokens_per_s": {
                        str(k): [round(x, 1) for x in v] for k, v in c["runs"].items()
                    },
                    "adaptive_state": {
                        key: (c.get("drafter") or {}).get(key)
                        for key in ("k_by_bucket", "calibration", "calibration_time")
                    },
                }
            figures = planner_errors(nodes, cells, pipeline, log, how["max_tokens"])
            errors.append(figures.pop("planner_real_error_max_pct"))
            report |= {f"{name}_{k}": v for k, v in figures.items()}
            report[f"{name}_sweep_s"] = {
                "verify": (node_inspect(nodes["verify"][0].pk) or {}).get("sweep_s"),
                "draft": ((node_inspect(nodes["draft"][0].pk) or {}).get("adaptive") or {}).get(
                    "sweep_s"
                ),
            }
        simulated = simulated_errors()
        report["adaptive_vs_best_fixed_min"] = round(min(vs_best), 3) if vs_best else None
        # the same against the best fixed k picked on the other repetition (held_out_best)
        report["adaptive_vs_best_fixed_held_out_min"] = (
            round(min(vs_held_out), 3) if vs_held_out else None
        )
        report["adaptive_vs_plain_min"] = round(min(vs_plain), 3) if vs_plain else None
        # the same configuration against itself: a ratio above sits within this much noise
        report["best_fixed_repeat_agreement_min"] = round(min(repeat), 3) if repeat else None
        report["adapt_rounds"] = max(adapt_rounds) if adapt_rounds else None
        report["planner_real_error_max_pct"] = round(max(errors), 1) if errors else None
        report["planner_sim_error_max_pct"] = round(max(simulated), 1)
        report["planner_apply_error_max_pct"] = round(max(errors + simulated), 1)
        report["config"]["low_phase_params"] = LOW_PARAMS
        report["bad_apply_rollback_s"] = None  # measured on the demo pair only
        if "demo" in served:
            pipeline, _ = served["demo"]
            report["bad_apply_rollback_s"] = (
                _bad_apply(base, key, pipeline, _phases("demo")["high"], AuditEvent, stack, log)
                if plan != "smoke"
                else None
            )
        return report
    finally:
        stack.close()


def _measure(name, pipeline, nodes, base, key, how, stack, log):
    """Every fixed k and adaptive k in each phase at 1 and 8 streams (each twice,
    interleaved: the machine is noisy); then adaptive over phase 1 followed at once by phase
    2, its drafter traced: (cells, rounds to settle after each switch)."""
    from inference.selectors import node_inspect

    phases = _phases(name)
    first, second = list(phases)
    rng = random.Random(0)
    drive(
        base=base,
        key=key,
        prompts_per_client=[[phases[first][0][0]]],
        max_tokens=8,
        params=phases[first][1],
    )
    cells: dict[tuple[int, str], dict[str, Any]] = {}
    adapt_rounds: list[int] = []
    ks, reps, requests, max_tokens = how["ks"], how["reps"], how["requests"], how["max_tokens"]
    for n in how["streams"]:
        for phase, work in phases.items():
            runs: dict[Any, list[float]] = {k: [] for k in [*ks, "adaptive"]}
            batches: dict[Any, list[int]] = {k: [] for k in ks}  # the drafter's round batches
            accept: list[float] = []
            top_ids: list[str] = []  # the generations of the largest fixed k's runs
            adaptive_ks: dict[int, int] = {}
            for _ in range(reps):
                # every configuration of a repetition runs the same prompts: their lengths
                # (prefill) moved a run's tokens/s more than k did, and a fixed seed gave
                # each k the same lucky or unlucky draw in every bench run
                prompts = _draw(work, n, requests, rng)
                for k in ks:
                    _set_policy(pipeline, {"mode": "fixed", "k": k})
                    began = time.time()
                    res = _run(base, key, work, n, requests, max_tokens, rng, prompts)
                    runs[k].append(res["tokens_per_s"])
                    batches[k] += round_batches(nodes, began)
                    if k == max(ks):
                        top_ids += res["ids"]
                        accept = accept or per_position(nodes)
                _set_policy(pipeline, ADAPTIVE)
                began = time.time()
                runs["adaptive"].append(
                    _run(base, key, work, n, requests, max_tokens, rng, prompts)["tokens_per_s"]
                )
                for k, rounds in k_rounds(nodes, began).items():  # what adaptive k drafted
                    adaptive_ks[k] = adaptive_ks.get(k, 0) + rounds
            if pipeline.drafter_kind == "model":  # every draft asks for k: the rows say it
                wait_rows(top_ids, stack)
                accept = per_position_of_rows(top_ids, max(ks)) or accept
            mean = {k: sum(v) / len(v) for k, v in runs.items()}
            cells[(n, phase)] = {
                "fixed": {k: mean[k] for k in ks},
                "best_fixed_held_out": held_out_best(runs, ks),
                # sequences per drafter round: below n where requests end and start (the
                # model prices every round at n; the dips weigh more the fewer rounds a request
                # needs, i.e. the larger k)
                "drafter_batch_mean": {
                    k: round(sum(b) / len(b), 2) if b else None for k, b in batches.items()
                },
                "adaptive": mean["adaptive"],
                "runs": runs,  # each repetition's tokens/s, by k and adaptive
                "adaptive_k_rounds": dict(sorted(adaptive_ks.items())),
                "per_position": accept,
                # the planner's cost inputs as this cell's runs left them (the round trip's
                # hop, the step costs): a snapshot at the end of the bench holds the last
                # runs' conditions, another stream count's
                "drafter": (node_inspect(nodes["draft"][0].pk) or {}).get("adaptive") or {},
                "verify_costs": (node_inspect(nodes["verify"][0].pk) or {}).get("step_costs"),
            }
            log(
                f"{name} N={n} {phase:5s} fixed k: "
                + " ".join(f"{k}:{mean[k]:.0f}" for k in ks)
                + f" | adaptive {mean['adaptive']:.0f} tok/s (k: rounds {adaptive_ks})"
                + " | drafter batch "
                + " ".join(f"{k}:{v}" for k, v in cells[(n, phase)]["drafter_batch_mean"].items())
            )
        _set_policy(pipeline, ADAPTIVE)
        _run(base, key, phases[first], n, requests, max_tokens, rng)
        switch_at = time.time()
        _run(base, key, phases[second], n, requests * 2, max_tokens, rng)
        time.sleep(1.2)
        trace = (node_inspect(nodes["draft"][0].pk) or {}).get("k_trace") or []
        # settled: drafting a k whose measured worth in the new phase is within 5 % of the
        # best fixed k's (and, as before, staying within 1 of where k ends up: reported)
        worthy = worthy_ks(cells[(n, second)]["fixed"])
        settled = settle_rounds_among(trace, switch_at, worthy, n)
        ks_used = [k for t, _b, k in trace if t >= switch_at]
        if settled is not None:
            adapt_rounds.append(settled)
        log(
            f"{name} N={n} {first} -> {second}: k {ks_used[:3]} ... {ks_used[-3:]}, "
            f"settled among k {sorted(worthy)} after {settled} rounds of {len(ks_used)} "
            f"(within 1 of its final k after {settle_rounds(trace, switch_at)})"
        )
        for phase in phases:
            cells[(n, phase)]["adaptive_k_final"] = ks_used[-1] if ks_used else None
    return cells, adapt_rounds


def _bad_apply(base, key, pipeline, corpus, AuditEvent, stack, log) -> float | None:
    """Traffic at high acceptance; k = 0 applied through the API; seconds to the rollback."""
    import httpx

    from fleet.planner import verification

    _set_policy(pipeline, {"mode": "fixed", "k": 4})
    stop = threading.Event()

    def traffic():
        rng = random.Random(3)
        while not stop.is_set():
            _run(base, key, corpus, 8, 1, 48, rng)

    t = threading.Thread(target=traffic, daemon=True)
    t.start()
    try:
        time.sleep(45)  # loaded 10 s buckets of this configuration alone before the change
        applied = time.time()
        r = httpx.post(
            f"{base}/api/v1/pipelines/{pipeline.pk}/k-policy",
            headers={"Authorization": f"Bearer {key}"},
            json={"k_policy": {"mode": "fixed", "k": 0}},
            timeout=30,
        )
        if r.status_code != 200:
            log(f"k-policy change refused: {r.status_code} {r.text[:300]}")
            return None
        deadline = applied + 180
        while time.time() < deadline:
            verification.run_checks()
            event = AuditEvent.objects.filter(reason__startswith="automatic rollback").first()
            if event is not None:
                seconds = event.created_at.timestamp() - applied
                log(f"rollback audited {seconds:.1f} s after the bad apply: {event.reason}")
                return round(seconds, 1)
            time.sleep(1.0)
        log("no rollback within 180 s")
        return None
    finally:
        stop.set()
        t.join(120)


def main_json(report: dict, path: str | None) -> None:
    if path:
        Path(path).write_text(json.dumps(report, indent=2, default=str))
