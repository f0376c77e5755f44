"""What the aggregator needs to know from the database, loaded in one go and refreshed every
few seconds: nodes (state, profile and what it can physically do, placement), pipelines
(configuration) and the signing keys of active node tokens (derived from their digests with
SECRET_KEY, see `fleet.telemetry.ingest.signing_key`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from fleet.nodes.models import Node, NodeToken
from fleet.nodes.signing import signing_key
from fleet.pipelines.models import Pipeline, Placement
from fleet.telemetry.admission import Limits


@dataclass(frozen=True)
class NodeInfo:
    id: int
    name: str
    state: str
    simulated: bool
    profile: str
    kind: str
    pipeline_id: int | None
    role: str | None  # placement role; None when the node is not placed
    limits: Limits  # what its hardware can do per second (from its profile)


@dataclass(frozen=True)
class PipelineInfo:
    id: int
    name: str
    simulated: bool
    config: dict


@dataclass
class Registry:
    nodes: dict[int, NodeInfo] = field(default_factory=dict)
    pipelines: dict[int, PipelineInfo] = field(default_factory=dict)
    keys: dict[int, list[str]] = field(default_factory=dict)


def pipeline_config(p: Pipeline) -> dict:
    return {
        "target_model": p.target_model,
        "drafter_kind": p.drafter_kind,
        "draft_model": p.draft_model,
        "k_policy": p.k_policy,
        "max_verify_batch": p.max_verify_batch,
        "max_batch_wait_ms": p.max_batch_wait_ms,
        "version": p.version,
    }


def load_registry() -> Registry:
    return _load(None)


def load_nodes(node_ids) -> tuple[Registry, set[int]]:
    """Just these nodes (and every pipeline): (their registry, the ids no longer in it —
    retired or deleted). For a state-change notice (`fleet.telemetry.notices`)."""
    ids = {int(n) for n in node_ids}
    registry = _load(ids)
    return registry, ids - set(registry.nodes)


def _load(ids: set[int] | None) -> Registry:
    only = {} if ids is None else {"node_id__in": ids}
    placements = {
        pl.node_id: (pl.pipeline_id, pl.role)
        for pl in Placement.objects.filter(**only).only("node_id", "pipeline_id", "role")
    }
    nodes = {}
    for n in (
        Node.objects.not_retired()
        .filter(**({} if ids is None else {"pk__in": ids}))
        .select_related("profile")
        .only(
            "id",
            "name",
            "state",
            "simulated",
            "profile__slug",
            "profile__kind",
            "profile__peak_bf16_tflops",
            "profile__tdp_w",
        )
    ):
        pipeline_id, role = placements.get(n.id, (None, None))
        nodes[n.id] = NodeInfo(
            id=n.id,
            name=n.name,
            state=n.state,
            simulated=n.simulated,
            profile=n.profile.slug,
            kind=n.profile.kind,
            pipeline_id=pipeline_id,
            role=role,
            limits=Limits.of_profile(
                peak_bf16_tflops=n.profile.peak_bf16_tflops, tdp_w=n.profile.tdp_w
            ),
        )
    pipelines = {
        p.id: PipelineInfo(id=p.id, name=p.name, simulated=p.simulated, config=pipeline_config(p))
        for p in Pipeline.objects.all()
    }
    keys: dict[int, list[str]] = {}
    tokens = NodeToken.objects.filter(revoked_at__isnull=True, **only)
    for node_id, token_hash in tokens.values_list("node_id", "token_hash"):
        if node_id in nodes:
            keys.setdefault(node_id, []).append(signing_key(node_id, token_hash))
    return Registry(nodes=nodes, pipelines=pipelines, keys=keys)
