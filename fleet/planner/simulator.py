"""The fleet simulator: virtual nodes of the catalogue's hardware in one process.

GPU verifiers (H100/H200/A100/L40S) and SRAM drafters (d-Matrix Corsair, Groq) are real Node rows
marked `simulated=True`, placed in simulated pipelines. Each tick the simulator models every
pipeline with the planner's own roofline (`fleet.planner.model`), draws acceptance from the
pipeline's configured alpha (numpy, vectorized over nodes), and sends one telemetry sample per node
through the real ingest path (`publish_many`, signed with the node's key, derived from its token
digest and SECRET_KEY). It heartbeats the nodes in bulk and follows rebalancing: pipeline versions
are polled every tick and placements/config re-read when they change (and every `reload_s` anyway),
node states are re-read too (a drained node stops taking work).
"""

from __future__ import annotations

import logging
import signal
import time
from dataclasses import dataclass, field

import numpy as np
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from fleet.accounts.secrets import new_secret
from fleet.nodes.models import HardwareProfile, Node, NodeToken
from fleet.pipelines.models import Pipeline, Placement, PlacementRole
from fleet.pipelines.policy import k_for
from fleet.pipelines.services import pipeline_create
from fleet.planner import measurements
from fleet.planner.model import Hardware, PipelineModel, UnusableProfile, predict
from fleet.telemetry.templates import Encoder

logger = logging.getLogger(__name__)

GPU_PROFILES = ("h100-sxm", "h200", "a100-80gb-sxm", "l40s")
SRAM_PROFILES = ("d-matrix-corsair", "groq-lpu")
MODELS = (
    ("llama-3.1-8b", "llama-3.2-1b"),
    ("llama-3.1-70b", "llama-3.2-1b"),
    ("qwen2.5-7b", "qwen2.5-0.5b"),
)
DEFAULT_ALPHAS = (0.55, 0.65, 0.72, 0.8, 0.85, 0.6, 0.75, 0.7)
LOAD = 0.8  # fraction of max_verify_batch a verifier runs at


@dataclass
class SimPipeline:
    pk: int
    version: int
    alpha: float
    model: PipelineModel
    policy: dict
    max_batch: int
    drafter_kind: str
    verifiers: list[int] = field(default_factory=list)
    drafters: list[int] = field(default_factory=list)


def setup_fleet(
    *, nodes: int, pipelines: int, prefix: str = "sim", alphas=DEFAULT_ALPHAS, reset: bool = False
) -> dict:
    """Create (or reuse) `nodes` simulated nodes spread over `pipelines` simulated pipelines:
    half GPU verifiers, half SRAM drafters. Returns {pipeline_id: alpha}."""
    if reset:
        teardown(prefix=prefix)
    existing = Pipeline.objects.filter(simulated=True, name__startswith=f"{prefix}-").order_by(
        "name"
    )
    if existing.exists():
        return {p.pk: _alpha_of(p, alphas, i) for i, p in enumerate(existing)}
    profiles = {
        p.slug: p for p in HardwareProfile.objects.filter(slug__in=GPU_PROFILES + SRAM_PROFILES)
    }
    gpus = [profiles[s] for s in GPU_PROFILES if s in profiles]
    srams = [profiles[s] for s in SRAM_PROFILES if s in profiles]
    if not gpus or not srams:
        raise RuntimeError("the hardware catalogue lacks GPU or SRAM profiles (run migrate)")
    pipelines = max(1, min(pipelines, max(nodes // 2, 1)))
    now = timezone.now()
    with transaction.atomic():
        created = []
        for i in range(pipelines):
            target, draft = MODELS[i % len(MODELS)]
            created.append(  # as the API makes one: revision 1 and a "create" audit event
                pipeline_create(
                    actor="simulator",
                    reason="simulated fleet",
                    name=f"{prefix}-{i + 1:02d}",
                    description=f"simulated pipeline, alpha {alphas[i % len(alphas)]}",
                    target_model=target,
                    draft_model=draft,
                    simulated=True,
                    k_policy={"mode": "fixed", "k": 4},
                    max_verify_batch=32,
                )
            )
        rows, roles = [], []
        for j in range(nodes):
            i = j % pipelines
            verify = (j // pipelines) % 2 == 0
            profile = gpus[i % len(gpus)] if verify else srams[i % len(srams)]
            rows.append(
                Node(
                    name=f"{prefix}-{'v' if verify else 'd'}-{j + 1:05d}",
                    profile=profile,
                    roles=["draft", "verify"] if verify else ["draft"],
                    state="online",
                    simulated=True,
                    last_seen=now,
                    labels={"simulated": "true"},
                )
            )
            roles.append((created[i], PlacementRole.VERIFY if verify else PlacementRole.DRAFT))
        Node.objects.bulk_create(rows, batch_size=500)
        made = {n.name: n for n in Node.objects.filter(name__in=[r.name for r in rows])}
        nodes_ = [made[r.name] for r in rows]
        Placement.objects.bulk_create(
            [
                Placement(pipeline=p, node=n, role=role)
                for n, (p, role) in zip(nodes_, roles, strict=True)
            ],
            batch_size=500,
        )
        tokens = []
        for n in nodes_:
            _, token_prefix, token_hash = new_secret("tdn")
            tokens.append(NodeToken(node=n, prefix=token_prefix, token_hash=token_hash))
        NodeToken.objects.bulk_create(tokens, batch_size=500)
    return {p.pk: alphas[i % len(alphas)] for i, p in enumerate(created)}


def _alpha_of(pipeline: Pipeline, alphas, i: int) -> float:
    desc = pipeline.description or ""
    if "alpha " in desc:
        try:
            return float(desc.rsplit("alpha ", 1)[1].split()[0])
        except ValueError:
            pass
    return alphas[i % len(alphas)]


def teardown(*, prefix: str = "sim") -> int:
    """Remove the simulated nodes and pipelines of `prefix` (and their placements)."""
    with transaction.atomic():
        n = Node.objects.filter(simulated=True, name__startswith=f"{prefix}-").delete()[0]
        Pipeline.objects.filter(
            simulated=True, name__startswith=f"{prefix}-", generations__isnull=True
        ).delete()
    return n


class Simulator:
    def __init__(
        self,
        alphas: dict[int, float],
        *,
        tick_s: float = 1.0,
        reload_s: float = 10.0,
        seed: int = 0,
        redis=None,
        publish=None,
        prefix: str | None = None,
    ):
        """`prefix`: simulate only the simulated nodes named `<prefix>-...` (two simulators
        side by side never report the same node); None: every simulated node."""
        self.alphas = alphas
        self.prefix = prefix
        self.tick_s, self.reload_s = tick_s, reload_s
        self.rng = np.random.default_rng(seed)
        self.redis = redis
        self._publish = publish
        self.encoder = Encoder()
        self.pipelines: dict[int, SimPipeline] = {}
        self.keys: dict[int, str] = {}
        self.node_ids: list[int] = []
        self.profiles: dict[int, Hardware] = {}
        self.roles: dict[int, str] = {}
        self.serving: set[int] = set()
        self.sent = 0
        self.stop = False
        self._loaded_at = 0.0
        self._last_heartbeat = 0.0

    # --- state from the database -------------------------------------------------------------
    def load(self) -> None:
        from fleet.telemetry.ingest import signing_key

        nodes = list(
            Node.objects.filter(
                simulated=True, **({"name__startswith": f"{self.prefix}-"} if self.prefix else {})
            )
            .exclude(state="retired")
            .select_related("profile")
        )
        self.profiles = {}
        for n in nodes:
            try:
                self.profiles[n.pk] = Hardware.from_profile(n.profile)
            except UnusableProfile as exc:  # nothing to time its steps by: not simulated
                logger.warning("simulator: node %s skipped: %s", n.name, exc)
        nodes = [n for n in nodes if n.pk in self.profiles]
        self.node_ids = [n.pk for n in nodes]
        self.serving = {n.pk for n in nodes if n.state == "online"}
        tokens = NodeToken.objects.filter(
            node_id__in=self.node_ids, revoked_at__isnull=True
        ).values_list("node_id", "token_hash")
        self.keys = {node_id: signing_key(node_id, token_hash) for node_id, token_hash in tokens}
        placements = list(
            Placement.objects.filter(node_id__in=self.node_ids).select_related(
                "pipeline", "node__profile"
            )
        )
        self.roles = {p.node_id: p.role for p in placements}
        by_pipeline: dict[int, list[Placement]] = {}
        for p in placements:
            by_pipeline.setdefault(p.pipeline_id, []).append(p)
        self.pipelines = {}
        for pid, rows in by_pipeline.items():
            pipeline = rows[0].pipeline
            alpha = self.alphas.get(pid, 0.7)
            m = measurements.pipeline_model(
                pipeline, placements=rows, measured_inputs={"alpha": alpha}
            )
            self.pipelines[pid] = SimPipeline(
                pk=pid,
                version=pipeline.version,
                alpha=alpha,
                model=m,
                policy=pipeline.k_policy,
                max_batch=pipeline.max_verify_batch,
                drafter_kind=pipeline.drafter_kind,
                verifiers=[p.node_id for p in rows if p.role == PlacementRole.VERIFY],
                drafters=[p.node_id for p in rows if p.role == PlacementRole.DRAFT],
            )
        self._loaded_at = time.monotonic()

    def changed(self) -> bool:
        """Did a pipeline we simulate change version (a rebalance was pushed)?"""
        versions = dict(
            Pipeline.objects.filter(pk__in=list(self.pipelines)).values_list("pk", "version")
        )
        return any(versions.get(pid) != sp.version for pid, sp in self.pipelines.items())

    def heartbeat(self) -> None:
        """What the agents' heartbeats do, in bulk: last_seen now; a registered or lost node
        comes online (draining and retired nodes stay as they are)."""
        nodes = Node.objects.filter(pk__in=self.node_ids)
        nodes.update(last_seen=timezone.now())
        nodes.filter(state__in=["registered", "lost"]).update(
            state="online", version=F("version") + 1
        )
        self._last_heartbeat = time.monotonic()

    # --- one tick ----------------------------------------------------------------------------
    def samples(self, now: float) -> list[tuple[int, dict, str]]:
        dt = self.tick_s
        out = []
        busy: set[int] = set()
        for sp in self.pipelines.values():
            vs = [n for n in sp.verifiers if n in self.serving]
            ds = [n for n in sp.drafters if n in self.serving]
            if not vs:
                continue
            m = sp.model.with_(n_verifiers=len(vs), n_drafters=len(ds))
            batch = max(1, int(round(sp.max_batch * LOAD)))
            k = k_for(sp.policy, batch) if (ds or sp.drafter_kind == "ngram") else 0
            p = predict(m, k=k, batch=batch)
            t_v = m.t_verify(batch, batch * (p.k + 1))
            t_d = m.t_draft(batch * len(vs) / max(len(ds), 1)) if p.k else 0.0
            rounds = dt / p.round_s
            # acceptance, vectorized over verifiers: drafts reaching position i ~ Binomial
            n_rounds = self.rng.poisson(rounds * batch, size=len(vs))
            per_pos = np.zeros((len(vs), p.k), dtype=np.int64)
            reach = n_rounds.copy()
            for i in range(p.k):
                reach = self.rng.binomial(reach, sp.alpha)
                per_pos[:, i] = reach
            accepted = per_pos.sum(axis=1)
            itl = p.round_s / max(p.expected_tokens, 1.0)
            for j, node_id in enumerate(vs):
                hw = self.profiles[node_id]
                util = p.verify_util
                power = hw.idle_w + (hw.tdp_w - hw.idle_w) * util
                drafts = int(n_rounds[j]) if p.k else 0
                steps = max(int(round(rounds)), 1)
                out.append(
                    (
                        node_id,
                        {
                            "ts": now,
                            "interval_s": dt,
                            "role": "verify",
                            "pipeline": sp.pk,
                            "simulated": True,
                            "num_drafts": drafts,
                            "num_draft_tokens": drafts * p.k,
                            "num_accepted_tokens": int(accepted[j]) if p.k else 0,
                            "num_accepted_tokens_per_pos": [int(v) for v in per_pos[j]]
                            if p.k
                            else [],
                            "num_draft_tokens_per_pos": [drafts] * p.k,
                            "generation_tokens": int(n_rounds[j]) + int(accepted[j]),
                            "requests_finished": int(self.rng.poisson(rounds * batch / 200)),
                            "verify_batch_hist": {str(batch): steps},
                            "verify_step_s": t_v,
                            "num_requests_running": batch,
                            "queue_depth": 0,
                            "itl_s": [itl * f for f in self.rng.uniform(0.5, 1.5, size=4)],
                            "ttft_s": [p.ttft_s * f for f in self.rng.uniform(0.8, 2.0, size=2)],
                            "power_w": power,
                            "power_source": "modeled",
                            "utilization": util,
                        },
                        self.keys.get(node_id),
                    )
                )
                busy.add(node_id)
            for node_id in ds:
                hw = self.profiles[node_id]
                util = p.draft_util
                out.append(
                    (
                        node_id,
                        {
                            "ts": now,
                            "interval_s": dt,
                            "role": "draft",
                            "pipeline": sp.pk,
                            "simulated": True,
                            "draft_steps": int(round(rounds * p.k)),
                            "draft_step_s": t_d,
                            "power_w": hw.idle_w + (hw.tdp_w - hw.idle_w) * util,
                            "power_source": "modeled",
                            "utilization": util,
                        },
                        self.keys.get(node_id),
                    )
                )
                busy.add(node_id)
        for node_id in self.node_ids:  # idle, unplaced or drained nodes: idle power only
            if node_id not in busy:
                hw = self.profiles[node_id]
                out.append(
                    (
                        node_id,
                        {
                            "ts": now,
                            "interval_s": dt,
                            "role": self.roles.get(node_id, "draft"),
                            "simulated": True,
                            "power_w": hw.idle_w,
                            "power_source": "modeled",
                            "utilization": 0.0,
                        },
                        self.keys.get(node_id),
                    )
                )
        return [(n, s, k) for n, s, k in out if k]

    def publish(self, items) -> int:
        if self._publish is not None:
            return self._publish(items)
        from fleet.telemetry.ingest import publish_encoded

        # the cheap signed path (fleet.telemetry.templates): the entries `publish_many`
        # would make, byte for byte, without re-serialising and re-keying what repeats
        encode = self.encoder.entry
        return publish_encoded(((n, encode(n, s, k)) for n, s, k in items), redis=self.redis)

    def step(self) -> int:
        now_m = time.monotonic()
        if now_m - self._loaded_at >= self.reload_s or self.changed():
            self.load()
        if now_m - self._last_heartbeat >= 2.0:
            self.heartbeat()
        items = self.samples(time.time())
        self.sent += self.publish(items) if items else 0
        return len(items)

    def run(self, seconds: float | None = None) -> int:
        """Tick until `seconds` have passed (forever if None) or SIGTERM/SIGINT."""

        def _stop(*_):
            self.stop = True

        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                signal.signal(sig, _stop)
            except ValueError:  # not the main thread
                pass
        self.load()
        start = time.monotonic()
        next_tick = start
        while not self.stop and (seconds is None or time.monotonic() - start < seconds):
            self.step()
            next_tick += self.tick_s
            time.sleep(max(0.0, next_tick - time.monotonic()))
        return self.sent
