"""bench_serving: N concurrent clients through the real API and real node workers on this
machine, against the same prompts through the engine in one process.

The bench runs in a throw-away data directory with its own embedded Redis and SQLite
database (`run()` re-executes the command there), starts the web server
(`fleet.runtime.web_serve`), the ledger consumer and two `run_node` workers (one drafter, one
verifier; no database credentials) as subprocesses, and drives clients with httpx: a
streaming POST /v1/completions each (`--api openai`, the default: what inference teams'
load tools send), or POST /api/v1/generations then GET .../stream (`--api rest`). Per N it reports
tokens/s, ITL p50/p99 (per token: the gap between token events split over their tokens),
TTFT, the verifier's batch size distribution (the delta of its histogram), then the same
prompts through `SpeculativeGenerator` in this process (same k, same concurrency cap), and
plain decoding (drafter_kind none) through the same path.
"""

from __future__ import annotations

import os
import random
import socket
import sys
import time
from pathlib import Path

from .serving_clients import drive
from .stack import NO_DATABASE, Stack, free_port, wait_for, wait_rows


def bench_key() -> str:
    """Migrate the bench's throw-away database and return an operator's API key."""
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from fleet.accounts.services import api_key_create, user_set_role

    call_command("migrate", verbosity=0)
    user = get_user_model().objects.create_user("bench", password=None)
    user_set_role(user=user, role="operator")
    _, key = api_key_create(user=user, name="bench")
    return key


def _setup(models: Path, *, k: int, max_batch: int, wait_ms: int):
    from fleet.nodes.models import HardwareProfile
    from fleet.nodes.services import node_register
    from fleet.pipelines.models import Pipeline, Placement

    key = bench_key()
    profile = HardwareProfile.objects.filter(kind="cpu").first()
    assert profile is not None  # seeded by nodes migration 0002
    pipeline = Pipeline.objects.create(
        name="bench",
        target_model=str(models / "demo-target"),
        draft_model=str(models / "demo-draft"),
        drafter_kind="model",
        k_policy={"mode": "fixed", "k": k},
        max_verify_batch=max_batch,
        max_batch_wait_ms=wait_ms,
    )
    nodes = {}
    for role in ("draft", "verify"):
        node, token = node_register(name=f"bench-{role}", profile=profile, roles=[role])
        Placement.objects.create(pipeline=pipeline, node=node, role=role)
        nodes[role] = (node, token)
    return pipeline, nodes, key


def _inspect(node_id: int) -> dict:
    """``node_inspect``, for a worker that has reported (it does every second)."""
    from inference.selectors import node_inspect

    got = node_inspect(node_id)
    if got is None:
        raise RuntimeError(f"node {node_id} has not reported its inspection figures")
    return got


def _hist_delta(before: dict, after: dict) -> dict[int, int]:
    out = {}
    for k, v in after.items():
        d = v - before.get(k, 0)
        if d:
            out[int(k)] = d
    return dict(sorted(out.items()))


def _phase_fracs(before: dict, after: dict, wall: float) -> dict[str, float]:
    """Where a worker loop's time went during a run, as shares of the run's wall time.

    Not "wait": the snapshots around a run are up to a second older/newer than the run, so
    the idle time outside it would count as waiting. The other phases are zero when idle."""
    b, a = before.get("phase_s") or {}, after.get("phase_s") or {}
    return {k: round((v - b.get(k, 0.0)) / wall, 3) for k, v in sorted(a.items()) if k != "wait"}


def _mean_batch(hist: dict[int, int]) -> float:
    n = sum(hist.values())
    return sum(k * v for k, v in hist.items()) / n if n else 0.0


def _inprocess(models: Path, rows: list[tuple[list[int], dict]], n: int, k: int) -> dict:
    """The same prompts and parameters through SpeculativeGenerator (k) or plain (k=None),
    at most n sequences at once (the same concurrency as n clients)."""
    from inference.engine.checkpoints import load_checkpoint
    from inference.engine.engines import DraftEngine, VerifyEngine
    from inference.engine.generator import SpeculativeGenerator
    from inference.worker.engine_cache import sampling_params

    tm, tok = load_checkpoint(models / "demo-target")
    verify = VerifyEngine(tm, tok, n_slots=n)
    draft = None
    if k:
        dm, _ = load_checkpoint(models / "demo-draft")
        draft = DraftEngine.from_model(dm, tok, n_slots=n)
    gen = SpeculativeGenerator(verify, draft, k=k or 0)
    prompts = [p for p, _ in rows]
    params = [sampling_params(ps) for _, ps in rows]
    gen.generate(prompts[:n], [sampling_params({**ps, "max_tokens": 4}) for _, ps in rows[:n]])
    t0 = time.perf_counter()
    outs = gen.generate(prompts, params)
    wall = time.perf_counter() - t0
    tokens = sum(len(o.token_ids) for o in outs)
    return {
        "requests": len(outs),
        "tokens": tokens,
        "wall_s": wall,
        "tokens_per_s": tokens / wall,
        "token_ids": [o.token_ids for o in outs],
    }


def bench(
    *,
    models: Path,
    ns: list[int],
    requests_per_client: int,
    max_tokens: int,
    k: int,
    max_batch: int,
    wait_ms: int,
    api: str = "openai",
    log=print,
) -> dict:
    import torch

    from fleet.pipelines.models import Pipeline
    from inference.models import Generation
    from inference.services import push_pipeline_config

    pipeline, nodes, key = _setup(models, k=k, max_batch=max_batch, wait_ms=wait_ms)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    stack = Stack(log)
    threads = str(max(1, (os.cpu_count() or 2) // 2))
    try:
        # TANDEM_BENCH_PROFILE_WEB=FILE: the web process runs under cProfile on CPU time
        # (inference.bench.thread_profile: the event loop in FILE, the sync lanes in FILE.lanes)
        profile = os.environ.get("TANDEM_BENCH_PROFILE_WEB")
        web_workers = int(os.environ.get("TANDEM_WEB_WORKERS") or 1)  # the bench's default: 1
        if web_workers == 1:
            stack.spawn(
                "web",
                [
                    sys.executable,
                    *(["-m", "inference.bench.thread_profile", profile] if profile else []),
                    "-m",
                    "fleet.runtime.web_serve",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                ],
            )
        else:  # as `manage.py up` runs them: web servers accepting on one socket
            from fleet.runtime.children import adopt_socket_argv

            listener = socket.create_server(("127.0.0.1", port), backlog=1024)
            listener.set_inheritable(True)
            fd = listener.fileno()
            for i in range(web_workers):
                name = "web" if i == 0 else f"web-{i + 1}"
                stack.spawn(name, adopt_socket_argv(fd), pass_fds=(fd,))
        stack.spawn("ledger", [sys.executable, "manage.py", "run_ledger"])
        for role, (node, token) in nodes.items():
            stack.spawn(
                role,
                [sys.executable, "manage.py", "run_node", "--role", role],
                {
                    "DATABASE_URL": NO_DATABASE,  # node workers need none
                    "TANDEM_NODE_ID": str(node.pk),
                    "TANDEM_NODE_TOKEN": token,
                    "TANDEM_API_URL": base,
                    "OMP_NUM_THREADS": threads,
                    "TANDEM_NODE_SLOTS": str(max(ns) + 8),
                },
            )

        def online():
            from fleet.nodes.models import Node

            return Node.objects.filter(state="online").count() == 2

        wait_for(online, 120, "the workers to come online", stack)
        rng = random.Random(0)
        corpus = _prompts()
        warm = [[corpus[0]]]
        drive(base=base, key=key, prompts_per_client=warm, max_tokens=8, api=api)  # warm-up
        report: dict = {
            "config": {
                "k": k,
                "api": api,
                "max_verify_batch": max_batch,
                "max_batch_wait_ms": wait_ms,
                "max_tokens": max_tokens,
                "requests_per_client": requests_per_client,
                "worker_threads": int(threads),
                "web_workers": web_workers,
                "cpus": os.cpu_count(),
                "models": str(models),
            }
        }
        for mode in ("spec", "plain"):
            if mode == "plain":
                Pipeline.objects.filter(pk=pipeline.pk).update(drafter_kind="none")
                pipeline.refresh_from_db()
                push_pipeline_config(pipeline)
                time.sleep(0.5)
            for n in ns:
                prompts = [
                    [rng.choice(corpus) for _ in range(requests_per_client)] for _ in range(n)
                ]
                time.sleep(1.2)  # the workers refresh their inspection figures each second
                before = {r: _inspect(nodes[r][0].pk)["stats"] for r in nodes}
                cpu0 = stack.cpu_s()
                res = drive(
                    base=base, key=key, prompts_per_client=prompts, max_tokens=max_tokens, api=api
                )
                cpu1 = stack.cpu_s()
                res["cpu_s"] = {k: round(cpu1[k] - cpu0[k], 2) for k in cpu1}
                webs = [k for k in res["cpu_s"] if k.startswith("web-")]  # several web processes
                res["cpu_s"]["web"] = round(
                    sum(res["cpu_s"].pop(k) for k in webs) + res["cpu_s"]["web"], 2
                )
                time.sleep(1.2)
                after = {r: _inspect(nodes[r][0].pk)["stats"] for r in nodes}
                for r in nodes:  # share of the wall time each worker spent in forward passes
                    busy = after[r]["busy_s"] - before[r]["busy_s"]
                    res[f"{r}_busy_frac"] = round(busy / res["wall_s"], 3)
                    rounds = after[r]["rounds"] - before[r]["rounds"]
                    res[f"{r}_ms_per_round"] = round(busy * 1000 / rounds, 2) if rounds else None
                    res[f"{r}_phase_frac"] = _phase_fracs(before[r], after[r], res["wall_s"])
                res["drafter_turnaround_ms"] = _inspect(nodes["verify"][0].pk).get(
                    "drafter_turnaround_ms"
                )
                wait_rows(res["ids"], stack)
                res["web_cpu_ms_per_request"] = round(
                    res["cpu_s"]["web"] * 1000 / max(res["requests"], 1), 2
                )
                hist = _hist_delta(
                    before["verify"]["batch_size_hist"], after["verify"]["batch_size_hist"]
                )
                res["verify_batch_hist"], res["mean_verify_batch"] = hist, _mean_batch(hist)
                rows = list(
                    Generation.objects.filter(pk__in=res.pop("ids")).values_list(
                        "prompt_tokens", "params", "output_tokens"
                    )
                )
                inproc = None
                for t in sorted({int(threads), os.cpu_count() or 1}):  # the better of both
                    torch.set_num_threads(t)
                    run = _inprocess(
                        models, [(p, ps) for p, ps, _ in rows], n, k if mode == "spec" else 0
                    )
                    run["threads"] = t
                    if inproc is None or run["tokens_per_s"] > inproc["tokens_per_s"]:
                        inproc = run
                assert inproc is not None  # the loop ran at least once
                same = sum(
                    o == i for (_, _, o), i in zip(rows, inproc.pop("token_ids"), strict=True)
                )
                res["inprocess"] = inproc
                res["workers_vs_inprocess"] = res["tokens_per_s"] / inproc["tokens_per_s"]
                res["greedy_identical"] = f"{same}/{len(rows)}"
                report[f"{mode}_n{n}"] = res
                log(_line(mode, n, res))
                log(
                    f"      CPU seconds during the run (wall {res['wall_s']:.2f} s): "
                    + " ".join(f"{k} {v:.2f}" for k, v in res["cpu_s"].items())
                )
                for r in nodes:
                    log(
                        f"      {r:6s} loop time by phase (share of wall): "
                        + " ".join(f"{k} {v:.2f}" for k, v in res[f"{r}_phase_frac"].items())
                    )
        for n in ns:
            s, p = report.get(f"spec_n{n}"), report.get(f"plain_n{n}")
            if s and p:
                report[f"spec_vs_plain_n{n}"] = s["tokens_per_s"] / p["tokens_per_s"]
        big = max(ns)
        report[f"mean_verify_batch_n{big}"] = report[f"spec_n{big}"]["mean_verify_batch"]
        report[f"workers_vs_inprocess_n{big}"] = report[f"spec_n{big}"]["workers_vs_inprocess"]
        report[f"ttft_p50_ms_n{big}"] = report[f"spec_n{big}"]["ttft_ms_p50"]
        report[f"ttft_p99_ms_n{big}"] = report[f"spec_n{big}"]["ttft_ms_p99"]
        # the web process's CPU per request: both modes at every N, all requests together
        runs = [v for k, v in report.items() if k.startswith(("spec_n", "plain_n"))]
        report["web_cpu_ms_per_request"] = round(
            sum(r["cpu_s"]["web"] for r in runs) * 1000 / sum(r["requests"] for r in runs), 2
        )
        return report
    finally:
        stack.close()


def _line(mode: str, n: int, r: dict) -> str:
    return (
        f"{mode:5s} N={n:<3d} workers {r['tokens_per_s']:7.1f} tok/s  "
        f"ITL p50 {r['itl_ms_p50']:6.1f} ms "
        f"p99 {r['itl_ms_p99']:6.1f} ms  TTFT p50 {r['ttft_ms_p50']:6.0f} ms "
        f"p99 {r['ttft_ms_p99']:6.0f} ms  web CPU {r['web_cpu_ms_per_request']:.1f} ms/req"
        " | in-process "
        f"{r['inprocess']['tokens_per_s']:7.1f} tok/s  ratio {r['workers_vs_inprocess']:.2f} | "
        f"verify batch mean {r['mean_verify_batch']:.1f} "
        f"| busy: verifier {r['verify_busy_frac']:.2f}"
        f" drafter {r['draft_busy_frac']:.2f} | greedy identical {r['greedy_identical']}"
    )


def _prompts() -> list[str]:
    """Prompts from the Python standard library's sources (what the demo pair knows)."""
    import inspect
    import json as json_mod
    import textwrap

    src = inspect.getsource(json_mod) + inspect.getsource(textwrap)
    lines = [ln for ln in src.splitlines() if len(ln.strip()) > 20]
    rng = random.Random(1)
    return [lines[i][:48] for i in rng.sample(range(len(lines)), 64)]
