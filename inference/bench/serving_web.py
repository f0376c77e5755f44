"""The web tier alone: `python -m inference.bench.serving_web [--clients 32] [--profile F]`.

The same clients as `bench_serving` (POST /api/v1/generations, then its SSE stream; or
/v1/completions with `stream`) against the real web server (`fleet.runtime.web_serve`; `--server
daphne` for comparison), with the workers replaced by a fake verifier process that answers
every start with `--rounds` token events of `--per-round` tokens, `--round-ms` apart, then
done (what a verifier round publishes). No model, no torch: what it measures is the web
process's CPU per request (from /proc) and the latency it adds, reproducible on a shared
machine where the model work of the full bench is noise. `--profile FILE` runs the web
server under `inference.bench.sampler` (every thread; a report to FILE), or, when FILE ends
in `.prof`, under `inference.bench.thread_profile` (cProfile on CPU time: the event loop in
FILE, the sync lanes in FILE.lanes; `python -m pstats FILE`).

Runs in a throw-away data directory with its own embedded Redis and SQLite database.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def fake_verifier(node_id: int, *, rounds: int, per_round: int, round_ms: float) -> None:
    """Answer each start: `rounds` tokens events then done, one round every `round_ms` for
    every sequence at once (one pipeline per round, as a verifier publishes)."""
    import redis

    from inference import wire

    client = redis.Redis.from_url(os.environ["REDIS_URL"])
    live: dict[str, int] = {}  # generation -> rounds done
    next_round = time.monotonic()
    while True:
        raw = client.blpop([wire.round_key(node_id)], timeout=0.005 if live else 1)
        msgs = [raw[1]] if raw else []
        msgs += client.lrange(wire.round_key(node_id), 0, -1)
        if len(msgs) > (1 if raw else 0):
            client.ltrim(wire.round_key(node_id), len(msgs) - (1 if raw else 0), -1)
        for m in msgs:
            kind, payload = json.loads(m)
            if kind == "start":
                live.setdefault(payload["gen"], 0)
        if not live or time.monotonic() < next_round:
            continue
        next_round = time.monotonic() + round_ms / 1000
        pipe = client.pipeline(transaction=False)
        for gid in list(live):
            done = live[gid] = live[gid] + 1
            toks = [65 + (i % 26) for i in range(per_round)]
            event = wire.tokens_event(toks, "".join(map(chr, toks)), done * per_round)
            pipe.xadd(wire.stream_key(node_id, gid), {"e": json.dumps(event)})
            if done == rounds:
                end = wire.done_event("length", 8, rounds * per_round)
                pipe.xadd(wire.stream_key(node_id, gid), {"e": json.dumps(end)})
                del live[gid]
        pipe.execute()


def _setup(tmp: Path):
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.utils import timezone
    from tokenizers import Tokenizer  # noqa: F401  (the web side's tokenizer library)

    from fleet.accounts.services import api_key_create, user_set_role
    from fleet.nodes.models import HardwareProfile, Node
    from fleet.pipelines.models import Pipeline, Placement
    from inference.training.byte_tokenizer import build_byte_tokenizer

    call_command("migrate", verbosity=0)
    model = tmp / "byte-model"
    model.mkdir()
    build_byte_tokenizer().save(str(model / "tokenizer.json"))
    (model / "config.json").write_text(
        json.dumps({"model_type": "llama", "max_position_embeddings": 512, "vocab_size": 261})
    )
    user = get_user_model().objects.create_user("bench", password=None)
    user_set_role(user=user, role="operator")
    _, key = api_key_create(user=user, name="bench")
    pipeline = Pipeline.objects.create(
        name="bench", target_model=str(model), draft_model=str(model), drafter_kind="model"
    )
    profile = HardwareProfile.objects.filter(kind="cpu").first()
    assert profile is not None, "the migrations seed the CPU hardware profiles"
    nodes = {}
    for role in ("draft", "verify"):
        node = Node.objects.create(
            name=f"bench-{role}",
            profile=profile,
            roles=[role],
            state="online",
            last_seen=timezone.now(),
        )
        Placement.objects.create(pipeline=pipeline, node=node, role=role)
        nodes[role] = node
    return key, nodes


def _proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def child(args) -> dict:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "fleet.settings")
    django.setup()
    from inference.bench.serving_clients import drive

    tmp = Path(os.environ["TANDEM_DATA_DIR"])
    key, nodes = _setup(tmp)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    logs = tmp / "logs"
    logs.mkdir(exist_ok=True)
    procs = []

    def spawn(name, argv):
        out = open(logs / f"{name}.log", "w")
        procs.append(
            subprocess.Popen(
                argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        )
        return procs[-1]

    prof = []
    if args.profile and args.profile.endswith(".prof"):  # cProfile on CPU time, per thread
        prof = ["-m", "inference.bench.thread_profile", str(Path(args.profile).resolve())]
    elif args.profile:  # every thread, sampled
        prof = ["-m", "inference.bench.sampler", str(Path(args.profile).resolve())]
    if args.server == "uvicorn":  # the production server (fleet/runtime/web_serve.py)
        server = ["-m", "fleet.runtime.web_serve", "--host", "127.0.0.1", "--port", str(port)]
    else:  # for comparison
        server = ["-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "fleet.asgi:application"]
    web = spawn("web", [sys.executable, *prof, *server])
    spawn(
        "verify",
        [sys.executable, "-m", "inference.bench.serving_web", "--fake-verifier"]
        + [str(nodes["verify"].pk), "--rounds", str(args.rounds)]
        + ["--per-round", str(args.per_round), "--round-ms", str(args.round_ms)],
    )
    try:
        import httpx

        for _ in range(100):
            try:
                httpx.get(f"{base}/healthz", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.2)
        corpus = [f"def function_{i}(x, y):" for i in range(64)]
        drive(base=base, key=key, prompts_per_client=[corpus[:1]], max_tokens=8, api=args.api)
        report = {}
        for n in [int(x) for x in args.clients.split(",")]:
            prompts = [corpus[i % 64 : i % 64 + args.requests] for i in range(n)]
            cpu0 = _proc_cpu_s(web.pid)
            res = drive(
                base=base,
                key=key,
                prompts_per_client=prompts,
                max_tokens=args.rounds * args.per_round,
                api=args.api,
            )
            cpu = _proc_cpu_s(web.pid) - cpu0
            res.pop("ids")
            res["web_cpu_ms_per_request"] = round(cpu * 1000 / res["requests"], 2)
            report[f"n{n}"] = res
            print(
                f"N={n:<3d} {args.api}: web CPU {res['web_cpu_ms_per_request']:.2f} ms/request; "
                f"TTFT p50 {res['ttft_ms_p50']:.1f} ms p99 {res['ttft_ms_p99']:.1f} ms "
                f"(submit p50 {res['submit_ms_p50']:.1f} ms, stream open p50 "
                f"{res['stream_open_ms_p50']:.1f} ms); "
                f"{res['tokens_per_s']:.0f} tok/s; errors {res['errors']}",
                flush=True,
            )
        return report
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 2 if p is web else 15)  # SIGINT: the sampler writes its report
        for p in procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, 9)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", default="32")
    parser.add_argument("--requests", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--per-round", type=int, default=4)
    parser.add_argument("--round-ms", type=float, default=25.0)
    parser.add_argument("--api", choices=["rest", "openai"], default="rest")
    parser.add_argument("--profile", default=None)
    parser.add_argument("--server", choices=["daphne", "uvicorn"], default="uvicorn")
    parser.add_argument("--json", default=None)
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--fake-verifier", type=int, default=None)
    args = parser.parse_args(argv)
    if args.fake_verifier is not None:
        fake_verifier(
            args.fake_verifier,
            rounds=args.rounds,
            per_round=args.per_round,
            round_ms=args.round_ms,
        )
        return 0
    if args.child:
        report = child(args)
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=2))
        return 0
    from fleet.runtime.embedded_redis import EmbeddedRedis

    with tempfile.TemporaryDirectory(prefix="tandem-webbench-") as tmp:
        redis = EmbeddedRedis(Path(tmp), record=False)
        env = {
            **os.environ,
            "TANDEM_DATA_DIR": tmp,
            "REDIS_URL": redis.start(),
            "LOG_LEVEL": "WARNING",
            "TANDEM_HEARTBEAT_PERIOD_S": "3600",  # the fake nodes stay healthy
        }
        env.pop("DATABASE_URL", None)
        argv = [a for a in (argv or sys.argv[1:])]
        if args.json:
            i = argv.index("--json")
            argv[i + 1] = str(Path(args.json).resolve())
        try:
            return subprocess.call(
                [sys.executable, "-m", "inference.bench.serving_web", *argv, "--child"],
                cwd=ROOT,
                env=env,
            )
        finally:
            redis.stop()


if __name__ == "__main__":
    raise SystemExit(main())
