"""Fixtures' machinery for the data-plane tests: a tiny random model pair on disk, nodes
and a pipeline in the (file) test database, and real worker processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import torch
from django.conf import settings
from django.db import connection

from fleet.nodes.models import HardwareProfile, Node
from fleet.nodes.services import node_register
from fleet.pipelines.models import Pipeline, Placement
from inference import wire
from inference.engine.checkpoints import save_checkpoint
from inference.engine.config import ModelConfig
from inference.engine.transformer import Transformer
from inference.selectors import stream_of
from inference.text.tokenizer import Tokenizer
from inference.training import byte_tokenizer as bt

ROOT = Path(__file__).resolve().parents[2]


def tiny_model(seed: int, *, std: float = 0.4, layers: int = 2, context: int = 256) -> Transformer:
    torch.manual_seed(seed)
    config = ModelConfig(
        vocab_size=bt.VOCAB_SIZE,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=context,
        bos_token_id=bt.BOS_ID,
        eos_token_id=bt.EOS_ID,
    )
    model = Transformer(config)
    for p in model.parameters():
        if p.dim() == 2:
            torch.nn.init.normal_(p, std=std)
    return model.eval()


def write_pair(root: Path) -> tuple[Path, Path]:
    """target + a drafter close to it (the target's weights plus noise): high acceptance."""
    tok = Tokenizer(bt.build_byte_tokenizer(), bos_token=bt.BOS, eos_token=bt.EOS)
    target = tiny_model(0)
    draft = tiny_model(0)
    with torch.no_grad():
        gen = torch.Generator().manual_seed(7)
        for p in draft.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.05 * p.std())
    return save_checkpoint(target, tok, root / "target"), save_checkpoint(
        draft, tok, root / "draft"
    )


def profile() -> HardwareProfile:
    p, _ = HardwareProfile.objects.get_or_create(
        slug="test-cpu",
        defaults=dict(
            kind="cpu",
            vendor="Test",
            model="CPU",
            memory_gb=16,
            memory_bandwidth_gbs=50,
            peak_bf16_tflops=1,
            tdp_w=65,
            idle_w=10,
        ),
    )
    return p


def make_pipeline(name, target, draft, *, kind="model", drafters=1, verifiers=1, **config):
    pipeline = Pipeline.objects.create(
        name=name,
        target_model=str(target),
        draft_model=str(draft) if draft else "",
        drafter_kind=kind,
        **config,
    )
    nodes = []
    for role, n in (("draft", drafters if kind != "none" else 0), ("verify", verifiers)):
        for i in range(n):
            node, token = node_register(name=f"{name}-{role}-{i}", profile=profile(), roles=[role])
            Placement.objects.create(pipeline=pipeline, node=node, role=role)
            nodes.append((node, role, token))
    return pipeline, nodes


def database_url() -> str:
    name = connection.settings_dict["NAME"]
    if connection.vendor == "sqlite":
        # the same options as settings' default SQLite: IMMEDIATE writers wait, never deadlock
        return f"sqlite:///{name}?timeout=20&transaction_mode=IMMEDIATE"
    s = connection.settings_dict
    host, port = s["HOST"] or "localhost", s["PORT"] or 5432
    if host.startswith("/"):  # a Unix socket's directory
        return f"postgres://{s['USER']}:{s['PASSWORD']}@{quote(host, safe='')}/{name}"
    return f"postgres://{s['USER']}:{s['PASSWORD']}@{host}:{port}/{name}"


# What node workers get for DATABASE_URL: a database that is not there. They must not need
# one (DESIGN.md, walls); a worker that tried to connect would fail its requests.
NO_DATABASE = "postgres://nobody:nothing@127.0.0.1:9/no-database-for-node-workers"


class Workers:
    """Real `manage.py run_node` processes, with no database credentials, and the control
    plane's ledger consumer (`manage.py run_ledger`, on the test database) that applies what
    they report; all killed (whole groups) on exit."""

    def __init__(self, log_dir: Path, api_url: str, *, ledger: bool = True, **env):
        assert api_url, "node workers need the control plane's API (live_server.url)"
        self.log_dir, self.api_url, self.env = log_dir, api_url, env
        self.procs: dict[int, subprocess.Popen] = {}
        self.ledger: subprocess.Popen | None = None
        self.ledger_runs = 0
        if ledger:
            self.start_ledger()

    def start_ledger(self) -> subprocess.Popen:
        self.ledger_runs += 1
        log = open(self.log_dir / f"ledger-{self.ledger_runs}.log", "w")
        self.ledger = subprocess.Popen(
            [sys.executable, "manage.py", "run_ledger"],
            cwd=ROOT,
            env={**os.environ, "DATABASE_URL": database_url()},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        return self.ledger

    def stop_ledger(self, sig=signal.SIGTERM) -> None:
        if self.ledger is not None and self.ledger.poll() is None:
            try:
                os.killpg(self.ledger.pid, sig)
            except ProcessLookupError:
                pass
            self.ledger.wait(15)

    def start(self, node: Node, role: str, token: str) -> subprocess.Popen:
        env = {
            **os.environ,
            "DATABASE_URL": NO_DATABASE,
            "TANDEM_NODE_ID": str(node.pk),
            "TANDEM_NODE_TOKEN": token,
            "TANDEM_API_URL": self.api_url,
            "TANDEM_HEARTBEAT_PERIOD_S": "1",
            "TANDEM_NODE_SLOTS": "48",
            "OMP_NUM_THREADS": "1",
            **self.env,
        }
        log = open(self.log_dir / f"{node.name}.log", "w")
        proc = subprocess.Popen(
            [sys.executable, "manage.py", "run_node", "--role", role, "--loglevel", "INFO"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.procs[node.pk] = proc
        return proc

    def kill(self, node: Node, sig=signal.SIGKILL) -> None:
        proc = self.procs[node.pk]
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        proc.wait(10)

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text()[-3000:]}" for p in self.log_dir.glob("*.log")
        )

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop_ledger()
        for proc in self.procs.values():
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(10)


def wait_online(nodes, workers: Workers, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    ids = [n.pk for n, _, _ in nodes]
    while time.monotonic() < deadline:
        if Node.objects.filter(pk__in=ids, state="online").count() == len(ids):
            return
        for proc in workers.procs.values():
            assert proc.poll() is None, f"a worker exited:\n{workers.logs()}"
        time.sleep(0.3)
    raise AssertionError(f"nodes not online in {timeout}s:\n{workers.logs()}")


def wait_done(gen_ids, timeout: float = 120, workers: Workers | None = None) -> dict:
    """Every stream's events once it ended (done/error); fails (never hangs) on timeout."""
    deadline = time.monotonic() + timeout
    pending, out = {str(g) for g in gen_ids}, {}
    while pending and time.monotonic() < deadline:
        for g in list(pending):
            events = stream_of(g)
            if events and events[-1][1]["type"] in wire.TERMINAL_TYPES:
                out[g] = [e for _, e in events]
                pending.discard(g)
        time.sleep(0.1)
    if pending:
        logs = workers.logs() if workers else ""
        raise AssertionError(f"{len(pending)} generations did not end in {timeout}s\n{logs}")
    return out


def ledger_settled(timeout: float = 30) -> None:
    """Wait until the ledger consumer has applied and acknowledged every report sent so far
    (call the loop's flush_writes() first: that only means sent)."""
    from fleet import redis_clients
    from inference import ledger, node_reports

    r = redis_clients.client()
    deadline = time.monotonic() + timeout
    while True:
        if not r.exists(node_reports.STREAM):
            return
        last = r.xinfo_stream(node_reports.STREAM)["last-generated-id"]
        groups = r.xinfo_groups(node_reports.STREAM)
        group = next((g for g in groups if g["name"] in (ledger.GROUP, ledger.GROUP.encode())), {})
        if group and group["pending"] == 0 and group["last-delivered-id"] == last:
            return
        assert time.monotonic() < deadline, f"the ledger did not catch up: {group}"
        time.sleep(0.05)


def tokens_of(events) -> list[int]:
    return [t for e in events if e["type"] == "tokens" for t in e["tokens"]]


def settings_summary() -> str:
    return f"redis={settings.REDIS_URL} db={database_url()}"
