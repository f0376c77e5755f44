"""`manage.py bench_telemetry --nodes 1000 [--seconds 20] [--aggregators N] [--json FILE]`
`manage.py bench_telemetry --nodes 10000 --scale-out [--json FILE]`

Feeds N simulated nodes, one signed sample per node per second, through the real ingest path
(Redis stream), with the real aggregator (`run_aggregator` subprocess) and a real ASGI server
(daphne subprocess). Two real websocket clients measure what a browser sees:
- the fleet page's socket (a logged-in viewer, /ws/live/, every node row in each message),
- the wall's socket (a signed wall link, /ws/wall/).
Lag = receive time - the newest sample timestamp a message includes. Prints and (with --json)
writes nodes, lag_p50_s, lag_p99_s, lag_max_s, messages_per_s_to_browser,
bytes_per_s_to_browser, aggregator_cpu (cores, all aggregators), simulator_cpu (cores: the
publishing thread, templated signed samples, `fleet.telemetry.benchload`) and more.

--scale-out: no browsers; what 1 and then 2 aggregator processes absorb (samples/s) when
offered a backlog beyond what one can take (`benchload.absorb_rate`), and the ratio.

The bench creates its nodes, pipelines, user and wall link in the configured database (all
marked simulated, names starting with `bench-`) and deletes them afterwards (--keep keeps them).
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from fleet.env import env_str
from fleet.runtime.embedded_redis import ensure_redis_url
from fleet.telemetry import benchload
from fleet.telemetry.ingest import SHARDS

WARMUP_S = 3.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _cpu_s(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


class Command(BaseCommand):
    help = "Benchmark the telemetry path: N simulated nodes -> Redis -> aggregator -> websocket."

    def add_arguments(self, parser):
        parser.add_argument("--nodes", type=int, default=1000)
        parser.add_argument("--seconds", type=float, default=20.0)
        parser.add_argument("--pipelines", type=int, default=4)
        parser.add_argument("--aggregators", type=int, default=1, help="aggregator processes")
        parser.add_argument(
            "--scale-out",
            action="store_true",
            help="measure what 1 and 2 aggregators absorb when offered more than they can",
        )
        parser.add_argument("--backlog-per-node", type=int, default=6, help="with --scale-out")
        parser.add_argument(
            "--sockets",
            default="fleet,wall",
            help="browser sockets to measure: fleet (the fleet page), wall, or both",
        )
        parser.add_argument("--json", dest="json_path", default=None)
        parser.add_argument("--keep", action="store_true", help="keep the bench rows")

    def handle(self, *args, nodes: int, seconds: float, pipelines: int, json_path, keep, **opts):
        aggregators, scale_out = opts["aggregators"], opts["scale_out"]
        sockets = tuple(x.strip() for x in opts["sockets"].split(",") if x.strip())
        if not sockets or set(sockets) - {"fleet", "wall"}:
            raise CommandError("--sockets: fleet, wall or fleet,wall")
        if nodes < 1 or seconds <= WARMUP_S:
            raise CommandError(f"--nodes >= 1 and --seconds > {WARMUP_S} please")
        if not 1 <= aggregators <= SHARDS:
            raise CommandError(f"--aggregators: 1..{SHARDS}")
        redis_server = ensure_redis_url(settings.DATA_DIR)
        settings.REDIS_URL = env_str("REDIS_URL")
        call_command("migrate", interactive=False, verbosity=0)
        run = secrets.token_hex(3)
        world = None
        try:
            world = self._create(run, nodes, max(1, pipelines))
            env = {**os.environ, "REDIS_URL": settings.REDIS_URL, "PYTHONUNBUFFERED": "1"}
            if scale_out:
                report = self._scale_out(world, env, opts["backlog_per_node"])
            else:
                report = self._live(world, env, seconds, aggregators, sockets)
        finally:
            if world is not None and not keep:
                self._delete(world)
            if redis_server:
                redis_server.stop()
        report = {"nodes": nodes, "pipelines": pipelines, **report, "cpus": os.cpu_count()}
        self.stdout.write(json.dumps(report, indent=2))
        if scale_out:
            self.stdout.write(f"2 aggregators absorb {report['scale_out_ratio']}x one (>= 1.7)")
        else:
            verdict = "OK" if (report["lag_p99_s"] or 99) <= 1.0 else "OVER TARGET"
            self.stdout.write(f"lag p99 {report['lag_p99_s']} s (target <= 1 s): {verdict}")
        if json_path:
            Path(json_path).write_text(json.dumps(report, indent=2) + "\n")
            self.stdout.write(f"written {json_path}")

    def _live(self, world: dict, env: dict, seconds: float, aggregators: int, sockets) -> dict:
        procs: list[subprocess.Popen] = []
        try:
            aggs = [_aggregator(env) for _ in range(aggregators)]
            procs += aggs
            port = _free_port()
            daphne = subprocess.Popen(
                [sys.executable, "-m", "daphne", "-v", "0", "-b", "127.0.0.1", "-p", str(port)]
                + ["fleet.asgi:application"],
                env=env,
                start_new_session=True,
            )
            procs.append(daphne)
            self._wait_ready(port, procs, aggregators)
            self.stdout.write(
                f"bench {world['run']}: {len(world['nodes'])} nodes, {seconds:.0f} s, "
                f"daphne :{port}, aggregators {[a.pid for a in aggs]}"
            )
            cpu0 = {p.pid: _cpu_s(p.pid) for p in procs}
            stop = threading.Event()
            sim_cpu: dict = {}
            publisher = threading.Thread(
                target=benchload.publish,
                args=(world["nodes"], stop, sim_cpu),
                name="bench-publisher",
                daemon=True,
            )
            publisher.start()
            t0 = time.monotonic()
            result = asyncio.run(_measure(port, world, seconds, sockets))
            elapsed = time.monotonic() - t0
            stop.set()
            publisher.join(timeout=5)
            cores = {p.pid: (_cpu_s(p.pid) - cpu0[p.pid]) / elapsed for p in procs}
            meta = _meta()
        finally:
            for proc in procs:
                _stop(proc)
        return {
            "seconds": seconds,
            "aggregators": aggregators,
            "sockets": list(sockets),
            **result,
            # cores: CPU seconds per second of the run
            "aggregator_cpu": round(sum(cores[a.pid] for a in aggs), 3),
            "aggregator_cpu_each": [round(cores[a.pid], 3) for a in aggs],
            "simulator_cpu": round(sim_cpu.get("s", 0.0) / elapsed, 3),
            "daphne_cpu": round(cores[daphne.pid], 3),
            "aggregator_samples": meta.get("samples"),
            "aggregator_dropped": meta.get("dropped", {}),
            "aggregator_tick_work_max_s": meta.get("tick_work_max_s"),
        }

    def _scale_out(self, world: dict, env: dict, per_node: int) -> dict:
        out: dict = {"backlog_per_node": per_node}
        for count in (1, 2):
            procs = [_aggregator(env) for _ in range(count)]
            try:
                self._wait_ready(None, procs, count)
                time.sleep(2.0)  # past the first registry load and rebalance
                got = benchload.absorb_rate(
                    [p.pid for p in procs],
                    world["nodes"],
                    per_node,
                    lambda: _meta().get("samples") or 0,
                )
            finally:
                for proc in procs:
                    _stop(proc)
            out[f"absorb_{count}"] = got
            self.stdout.write(f"{count} aggregator(s): {got}")
        one, two = out["absorb_1"]["samples_per_s"], out["absorb_2"]["samples_per_s"]
        out["scale_out_ratio"] = round(two / one, 2) if one and two else None
        return out

    # --- setup / teardown -----------------------------------------------------------------------
    def _create(self, run: str, n: int, n_pipelines: int) -> dict:
        from django.contrib.auth import get_user_model
        from django.db import transaction
        from django.test import Client

        from fleet.accounts.models import WallLink
        from fleet.accounts.secrets import new_secret
        from fleet.accounts.services import user_set_role
        from fleet.accounts.wall_links import wall_token
        from fleet.nodes.models import HardwareProfile, Node, NodeToken
        from fleet.pipelines.models import Pipeline, Placement
        from fleet.telemetry.ingest import signing_key

        with transaction.atomic():
            profile = HardwareProfile.objects.order_by("id").first()
            if profile is None:
                profile = HardwareProfile.objects.create(
                    slug=f"bench-{run}",
                    kind="gpu",
                    vendor="Bench",
                    model="Simulated",
                    memory_gb=80,
                    memory_bandwidth_gbs=3000,
                    peak_bf16_tflops=900,
                    tdp_w=700,
                    idle_w=80,
                )
            pipes = [
                Pipeline.objects.create(
                    name=f"bench-{run}-{i}",
                    target_model="bench",
                    draft_model="bench",
                    simulated=True,
                )
                for i in range(n_pipelines)
            ]
            nodes = Node.objects.bulk_create(
                Node(
                    name=f"bench-{run}-{i:05d}",
                    profile=profile,
                    roles=["draft", "verify"],
                    state="online",
                    simulated=True,
                )
                for i in range(n)
            )
            if not nodes or nodes[0].pk is None:  # backends without RETURNING
                nodes = list(Node.objects.filter(name__startswith=f"bench-{run}-").order_by("name"))
            tokens, keyed = [], []
            for i, node in enumerate(nodes):
                plain, prefix, digest = new_secret("tdn")
                tokens.append(NodeToken(node=node, prefix=prefix, token_hash=digest))
                role = "verify" if i % 5 == 0 else "draft"
                key = signing_key(node.pk, digest)
                keyed.append((node.pk, key, role, pipes[i % n_pipelines].pk))
            NodeToken.objects.bulk_create(tokens)
            Placement.objects.bulk_create(
                Placement(node_id=nid, pipeline_id=pid, role=role) for nid, _, role, pid in keyed
            )
            user = get_user_model().objects.create_user(
                username=f"bench-{run}", password=secrets.token_urlsafe(16)
            )
            user_set_role(user=user, role="viewer")
            link = WallLink.objects.create(name=f"bench-{run}")
        browser = Client()
        browser.force_login(user)
        return {
            "run": run,
            "nodes": keyed,
            "pipelines": [p.pk for p in pipes],
            "node_ids": [k[0] for k in keyed],
            "user": user.pk,
            "cookie": f"sessionid={browser.cookies[settings.SESSION_COOKIE_NAME].value}",
            "wall_token": wall_token(link),
            "link": link.pk,
        }

    def _delete(self, world: dict) -> None:
        from django.contrib.auth import get_user_model

        from fleet.accounts.models import WallLink
        from fleet.nodes.models import Node
        from fleet.pipelines.models import Pipeline
        from fleet.telemetry.models import Rollup

        Rollup.objects.filter(scope="node", scope_id__in=world["node_ids"]).delete()
        Rollup.objects.filter(scope="pipeline", scope_id__in=world["pipelines"]).delete()
        Node.objects.filter(pk__in=world["node_ids"]).delete()
        Pipeline.objects.filter(pk__in=world["pipelines"]).delete()
        WallLink.objects.filter(pk=world["link"]).delete()
        get_user_model().objects.filter(pk=world["user"]).delete()

    def _wait_ready(self, port: int | None, procs: list, aggregators: int, timeout=90.0):
        """daphne answers (when there is one), every aggregator holds its share of the
        shards, and the leader has written its meta record."""
        from fleet.telemetry.ingest import client
        from fleet.telemetry.shards import LEASE_PREFIX, MEMBERS_KEY

        deadline = time.monotonic() + timeout
        web_ok = port is None
        while time.monotonic() < deadline:
            for proc in procs:
                if proc.poll() is not None:
                    raise CommandError(f"a bench process exited early ({proc.args[:3]})")
            if not web_ok:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2):
                        web_ok = True
                except OSError:
                    pass
            r = client()
            owners = r.mget([f"{LEASE_PREFIX}{i}" for i in range(SHARDS)])
            fair = -(-SHARDS // aggregators)
            split = (
                r.zcard(MEMBERS_KEY) == aggregators
                and None not in owners
                and max(owners.count(o) for o in set(owners)) <= fair
            )
            meta = _meta()
            if web_ok and split and meta.get("ts", 0) > time.time() - 5:
                return
            time.sleep(0.2)
        raise CommandError("daphne or the aggregators did not come up in time")


def _aggregator(env: dict) -> subprocess.Popen:
    manage = str(Path(settings.BASE_DIR) / "manage.py")
    return subprocess.Popen(
        [sys.executable, manage, "run_aggregator"],
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
    )


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _meta() -> dict:
    from fleet.telemetry.snapshot import read_fields

    return read_fields("meta")[0] or {}


async def _measure(port: int, world: dict, seconds: float, sockets: tuple) -> dict:
    import websockets

    from fleet.accounts.wall_links import wall_protocols

    origin = f"http://127.0.0.1:{port}"
    base = f"ws://127.0.0.1:{port}"
    stats: dict[str, dict] = {
        "fleet": {"lags": [], "n": 0, "bytes": 0},
        "wall": {"lags": [], "n": 0, "bytes": 0},
    }
    started = time.time()
    deadline = started + seconds

    async def reader(name: str, url: str, headers: dict, subscribe: dict | None, protocols=None):
        async with websockets.connect(
            url, origin=origin, additional_headers=headers, max_size=2**24, subprotocols=protocols
        ) as ws:
            if subscribe:
                await ws.send(json.dumps(subscribe))
            while True:
                remaining = deadline - time.time()
                if remaining <= 0:
                    return
                try:
                    raw = await asyncio.wait_for(ws.recv(), timeout=remaining)
                except TimeoutError:
                    return
                except websockets.ConnectionClosed as exc:  # e.g. a message over the limit
                    stats[name]["error"] = f"socket closed: {exc}"
                    return
                received = time.time()
                message = json.loads(raw)
                if message.get("type") != "fleet.update" or received - started < WARMUP_S:
                    continue
                s = stats[name]
                s["n"] += 1
                s["bytes"] += len(raw)
                if message.get("newest_ts"):
                    s["lags"].append(received - message["newest_ts"])

    readers = []
    if "fleet" in sockets:
        readers.append(
            reader(
                "fleet",
                f"{base}/ws/live/",
                {"Cookie": world["cookie"]},
                {"action": "subscribe", "topic": "fleet"},
            )
        )
    if "wall" in sockets:
        # as a screen sends its wall token: a subprotocol, never in the (logged) URL
        readers.append(
            reader("wall", f"{base}/ws/wall/", {}, None, wall_protocols(world["wall_token"]))
        )
    await asyncio.gather(*readers)
    window = seconds - WARMUP_S
    fleet, wall = stats["fleet"], stats["wall"]

    def r(v):
        return None if v is None else round(v, 3)

    return {
        "lag_p50_s": r(_percentile(fleet["lags"], 0.5)),
        "lag_p99_s": r(_percentile(fleet["lags"], 0.99)),
        "lag_max_s": r(max(fleet["lags"]) if fleet["lags"] else None),
        "lag_mean_s": r(statistics.fmean(fleet["lags"]) if fleet["lags"] else None),
        "messages_per_s_to_browser": round(fleet["n"] / window, 2),
        "bytes_per_s_to_browser": round(fleet["bytes"] / window),
        "fleet_messages": fleet["n"],
        "fleet_socket_error": fleet.get("error"),
        "wall_lag_p50_s": r(_percentile(wall["lags"], 0.5)),
        "wall_lag_p99_s": r(_percentile(wall["lags"], 0.99)),
        "wall_socket_error": wall.get("error"),
        "wall_messages_per_s": round(wall["n"] / window, 2),
    }
