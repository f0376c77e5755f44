"""bench_control: does speculation control hold up, measured through the real workers?

In a throw-away data directory (as bench_serving: its own Redis and SQLite), the web server,
the ledger, the telemetry aggregator and one drafter + one verifier `run_node` worker on the
demo pair serve clients over the REST API. For 1 and 8 concurrent streams and two phases --
high acceptance (the demo pair's own domain: Python source lines, greedy) and low acceptance
(random characters, sampled hot: LOW_PARAMS) -- it measures every fixed k in the sweep and
adaptive k, each twice, interleaved; then adaptive over phase 1 followed at once by phase 2
(so the drafter must re-settle), all in this one run:

- adaptive_vs_best_fixed_min: adaptive goodput / the best fixed k of that phase (min over
  phases x streams);
- adaptive_vs_plain_min: adaptive / k = 0 (same cells);
- adapt_rounds: rounds after the phase switch until adaptive k settles (its drafter's trace);
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
import os
import random
import string
import sys
import threading
import time
from pathlib import Path
from typing import Any

from .serving import _prompts, _setup
from .serving_clients import drive
from .stack import NO_DATABASE, Stack, free_port, wait_for, wait_rows

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


def _run(base, key, phase, n, requests, max_tokens, rng) -> dict:
    corpus, params = phase
    prompts = [[rng.choice(corpus) for _ in range(requests)] for _ in range(n)]
    r = drive(base=base, key=key, prompts_per_client=prompts, max_tokens=max_tokens, params=params)
    return {"tokens_per_s": r["tokens_per_s"], "ids": r["ids"], "wall_s": r["wall_s"]}


def per_position(ids: list[str], stack) -> list[float]:
    """P(drafts 0..i accepted) over a run's generations, from the ledger's counters."""
    from inference.models import Generation

    wait_rows(ids, stack)
    acc: list[int] = []
    drafts: list[int] = []
    for c in Generation.objects.filter(pk__in=ids).values_list("counters", flat=True):
        for name, into in (
            ("num_accepted_tokens_per_pos", acc),
            ("num_draft_tokens_per_pos", drafts),
        ):
            for i, v in enumerate((c or {}).get(name) or []):
                into.extend([0] * (i + 1 - len(into)))
                into[i] += v
    return [a / d for a, d in zip(acc, drafts, strict=False) if d]


def settle_rounds(trace: list, switch_at: float, *, share: float = 0.9) -> int | None:
    """Rounds after `switch_at` until k settles: the first round from which at least `share`
    of the rounds to the end stay within 1 of where k ends up (the mode of the last half; a
    k between two of nearly equal worth wanders a little without being unsettled)."""
    after = [k for t, _b, k in trace if t >= switch_at]
    if len(after) < 4:
        return None
    tail = after[len(after) // 2 :]
    final = max(set(tail), key=tail.count)
    for i in range(len(after)):
        rest = after[i:]
        if sum(abs(k - final) <= 1 for k in rest) >= share * len(rest):
            return i
    return len(after)


def bench(*, models: Path, quick: bool, log=print) -> dict:
    from fleet.audit.models import AuditEvent
    from inference.selectors import node_inspect

    ks = [0, 1, 2, 4, 8] if quick else list(range(9))
    requests, max_tokens = (2, 48) if quick else (3, 64)
    pipeline, nodes, key = _setup(models, k=4, max_batch=32, wait_ms=20)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    stack = Stack(log)
    threads = str(max(1, (os.cpu_count() or 2) // 2))
    report: dict[str, Any] = {"config": {"ks": ks, "requests": requests, "max_tokens": max_tokens}}
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
        for role, (node, token) in nodes.items():
            stack.spawn(
                role,
                [sys.executable, "manage.py", "run_node", "--role", role],
                {
                    "DATABASE_URL": NO_DATABASE,
                    "TANDEM_NODE_ID": str(node.pk),
                    "TANDEM_NODE_TOKEN": token,
                    "TANDEM_API_URL": base,
                    "OMP_NUM_THREADS": threads,
                    "TANDEM_NODE_SLOTS": "16",
                },
            )

        def online():
            from fleet.nodes.models import Node

            return Node.objects.filter(state="online").count() == 2

        wait_for(online, 180, "the workers to come online", stack)
        drive(base=base, key=key, prompts_per_client=[[_prompts()[0]]], max_tokens=8)
        sweep = {
            r: (node_inspect(nodes[r][0].pk) or {}).get(
                "sweep_s" if r == "verify" else "adaptive", None
            )
            for r in nodes
        }
        report["sweep_s"] = {
            "verify": sweep["verify"],
            "draft": (sweep["draft"] or {}).get("sweep_s"),
        }
        phases = {"high": (_prompts(), None), "low": (_low_prompts(), LOW_PARAMS)}
        rng = random.Random(0)
        cells: dict[tuple[int, str], dict[str, Any]] = {}
        adapt_rounds: list[int] = []
        reps = 2  # each configuration measured twice, interleaved: the machine is noisy
        for n in (1, 8):
            for phase, work in phases.items():
                runs: dict[Any, list[float]] = {k: [] for k in [*ks, "adaptive"]}
                accept: list[float] = []
                for _ in range(reps):
                    for k in ks:
                        _set_policy(pipeline, {"mode": "fixed", "k": k})
                        res = _run(base, key, work, n, requests, max_tokens, rng)
                        runs[k].append(res["tokens_per_s"])
                        if k == max(ks) and not accept:
                            accept = per_position(res["ids"], stack)
                    _set_policy(pipeline, ADAPTIVE)
                    runs["adaptive"].append(
                        _run(base, key, work, n, requests, max_tokens, rng)["tokens_per_s"]
                    )
                mean = {k: sum(v) / len(v) for k, v in runs.items()}
                cells[(n, phase)] = {
                    "fixed": {k: mean[k] for k in ks},
                    "adaptive": mean["adaptive"],
                    "per_position": accept,
                }
                log(
                    f"N={n} {phase:4s} fixed k: "
                    + " ".join(f"{k}:{mean[k]:.0f}" for k in ks)
                    + f" | adaptive {mean['adaptive']:.0f} tok/s"
                )
            # re-settling: adaptive over high then low, back to back, its drafter traced
            _set_policy(pipeline, ADAPTIVE)
            _run(base, key, phases["high"], n, requests, max_tokens, rng)
            switch_at = time.time()
            _run(base, key, phases["low"], n, requests * 2, max_tokens, rng)
            time.sleep(1.2)
            trace = (node_inspect(nodes["draft"][0].pk) or {}).get("k_trace") or []
            settled = settle_rounds(trace, switch_at)
            ks_used = [k for t, _b, k in trace if t >= switch_at]
            if settled is not None:
                adapt_rounds.append(settled)
            log(
                f"N={n} high -> low: k {ks_used[:3]} ... {ks_used[-3:]}, "
                f"settled after {settled} rounds of {len(ks_used)}"
            )
            for phase in phases:
                cells[(n, phase)]["adaptive_k_final"] = ks_used[-1] if ks_used else None
        vs_best, vs_plain = [], []
        for (n, phase), c in cells.items():
            best = max(c["fixed"].values())
            vs_best.append(c["adaptive"] / best)
            vs_plain.append(c["adaptive"] / c["fixed"][0])
            report[f"n{n}_{phase}"] = {
                "fixed_tokens_per_s": {str(k): round(v, 1) for k, v in c["fixed"].items()},
                "best_fixed_k": max(c["fixed"], key=lambda k: c["fixed"][k]),
                "adaptive_tokens_per_s": round(c["adaptive"], 1),
                "adaptive_k_final": c["adaptive_k_final"],
                "adaptive_vs_best_fixed": round(c["adaptive"] / best, 3),
                "adaptive_vs_plain": round(c["adaptive"] / c["fixed"][0], 3),
            }
        report["adaptive_vs_best_fixed_min"] = round(min(vs_best), 3)
        report["adaptive_vs_plain_min"] = round(min(vs_plain), 3)
        report["adapt_rounds"] = max(adapt_rounds) if adapt_rounds else None
        report |= _planner_errors(nodes, cells, pipeline, log, max_tokens)
        report["config"]["low_phase_params"] = LOW_PARAMS
        report["bad_apply_rollback_s"] = _bad_apply(
            base, key, pipeline, phases["high"], AuditEvent, stack, log
        )
        return report
    finally:
        stack.close()


def _client_rates(m, measured: dict, n: int, tokens: int) -> dict[int, float]:
    """What n clients measure for each k from the model's per-sequence rate r(k): a request
    of `tokens` tokens takes F + tokens / r(k), where F (submit, claim, prefill, the stream's
    open and close) is calibrated once, on plain decoding's measured run."""
    from fleet.planner.model import predict

    rate = {k: predict(m, k=k, batch=n).goodput_tps / n for k in measured}
    fixed = max(n * tokens / measured[0] - tokens / rate[0], 0.0) if rate[0] else 0.0
    return {k: n * tokens / (fixed + tokens / r) if r else 0.0 for k, r in rate.items()}


def _planner_errors(nodes, cells, pipeline, log, requests_tokens: int) -> dict:
    """The planner's goodput model fed by what the real nodes measured (their cost tables and
    round trip, each run's acceptance) predicts every fixed k; its recommended k against
    that k's measured run. A request's fixed cost on the client/web path (outside the model's
    rounds) is taken from plain decoding's measured run: one measured point, as the planner
    itself calibrates to the configuration that runs (`_client_rates`). Then the simulator's
    roofline for this machine's CPU profile, calibrated the same way; and 20 simulated
    fleets."""
    from fleet.planner import measurements
    from fleet.planner.adaptive import AdaptiveK
    from fleet.planner.costs import StepCosts
    from fleet.planner.model import Hardware, PipelineModel
    from inference.selectors import node_inspect

    draft, verify = ((node_inspect(nodes[r][0].pk) or {}) for r in ("draft", "verify"))
    snap = draft.get("adaptive") or {}
    a = AdaptiveK()
    a.draft_costs = StepCosts.from_json(snap.get("draft_costs"))
    a.verify_costs = StepCosts.from_json(verify.get("step_costs"))
    a.hop_s = (snap.get("hop_ms") or 0.0) / 1000
    cpu = Hardware.from_profile(nodes["verify"][0].profile)
    sim = PipelineModel(
        verifier=cpu,
        drafter=cpu,
        target=measurements.model_spec(pipeline.target_model, default_params=1e8),
        draft=measurements.model_spec(pipeline.draft_model, default_params=1e7),
    )
    errors: list[float] = []
    sim_cpu: list[float] = []
    out: dict[str, Any] = {}
    tokens = requests_tokens  # tokens a request asks for (each client runs them in turn)
    for (n, phase), c in cells.items():
        per_pos = tuple(c["per_position"])
        m, _vb = a.model(n)
        m = m.with_(per_position=per_pos, alpha=None if per_pos else 0.5, n_drafters=1)
        roof = sim.with_(per_position=per_pos, alpha=None if per_pos else 0.5)
        pred = _client_rates(m, c["fixed"], n, tokens)
        best = max(pred, key=lambda k: pred[k])
        err = abs(pred[best] - c["fixed"][best]) / c["fixed"][best] * 100
        errors.append(err)
        rp = _client_rates(roof, c["fixed"], n, tokens)
        sim_cpu.append(max(abs(rp[k] - v) / v * 100 for k, v in c["fixed"].items()))
        out[f"planner_real_n{n}_{phase}"] = {
            "recommended_k": best,
            "measured_best_k": max(c["fixed"], key=lambda k: c["fixed"][k]),
            "predicted_tokens_per_s": {str(k): round(v, 1) for k, v in pred.items()},
            "error_pct": round(err, 1),
            "per_position": [round(p, 3) for p in per_pos],
        }
    simulated = _simulated_errors()
    out["planner_real_error_max_pct"] = round(max(errors), 1)
    out["planner_sim_error_max_pct"] = round(max(simulated), 1)
    out["planner_apply_error_max_pct"] = round(max(errors + simulated), 1)
    out["sim_vs_real_cpu_error_pct"] = round(max(sim_cpu), 1)
    log(
        f"planner error: real {[round(e, 1) for e in errors]} %, simulated max "
        f"{max(simulated):.1f} %; CPU roofline vs real, worst k: {max(sim_cpu):.1f} %"
    )
    return out


def _simulated_errors(n: int = 20) -> list[float]:
    """20 random simulated fleets: telemetry of the current configuration (with sampling
    noise) -> the planner's model -> its recommended k; the simulator's physics at that k
    is what the simulated fleet then measures."""
    from fleet.nodes.models import HardwareProfile
    from fleet.planner import measurements
    from fleet.planner.model import Hardware, ModelSpec, PipelineModel, predict
    from fleet.planner.recommend import best_k_at

    rng = random.Random(11)
    gpus = [Hardware.from_profile(p) for p in HardwareProfile.objects.filter(kind="gpu")]
    drafters = [Hardware.from_profile(p) for p in HardwareProfile.objects.exclude(kind="cpu")]
    errors = []
    for _ in range(n):
        truth = PipelineModel(
            alpha=rng.uniform(0.4, 0.9),
            verifier=rng.choice(gpus),
            drafter=rng.choice(drafters),
            target=ModelSpec("t", rng.choice([8e9, 70e9]), n_layers=32),
            draft=ModelSpec("d", rng.choice([0.5e9, 1e9]), n_layers=16, kv_dim=512),
            n_verifiers=rng.randint(1, 4),
            n_drafters=rng.randint(1, 4),
        )
        batch, k = rng.choice([4, 16, 26, 64]), rng.randint(1, 6)
        at = predict(truth, k=k, batch=batch)
        rows = [
            {
                "alpha": truth.alpha,
                "batch_mean": batch,
                "acceptance_rate": (at.expected_tokens * rng.uniform(0.95, 1.05) - 1) / k,
                "mean_acceptance_length": at.expected_tokens,
                "verify_step_ms": truth.t_verify(batch, batch * (k + 1)) * 1000,
                "draft_step_ms": truth.t_draft(batch * truth.n_verifiers / truth.n_drafters) * 1000,
            }
            for _ in range(30)
        ]
        seen = measurements.measured_from_rollups(rows, default_k=k)
        planned = truth.with_(
            alpha=seen.get("alpha", truth.alpha),
            verify_scale=measurements.verify_scale(truth, seen["verify_points"])
            if seen.get("verify_points")
            else 1.0,
        )
        rec = best_k_at(planned, batch)
        real = predict(truth, k=rec.k, batch=batch).goodput_tps
        errors.append(abs(rec.goodput_tps - real) / real * 100)
    return errors


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
