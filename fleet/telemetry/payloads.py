"""The websocket messages of the live console: one TypedDict per message type, one helper to
send them to a group. The aggregator serialises a message ONCE; every consumer in the group
forwards the same text (no per-client re-encoding)."""

from __future__ import annotations

import heapq
import json
from typing import Literal, NotRequired, TypedDict

GROUP_FLEET = "fleet"  # the fleet page: deltas (fleet.telemetry.deltas), one per tick
GROUP_WALL = "wall"  # the same without node rows (the wall shows totals and pipelines)


# A pipeline page lists at most this many nodes per role (the first by name); its
# `pipeline.update` carries the rows of just those nodes, so a message stays ~30 KB at any
# pipeline size (every row of a 2,500-node pipeline was ~500 KB twice a second). The rest are
# on the fleet page, filtered by pipeline.
PIPELINE_ROWS_PER_ROLE = 50


def shown_per_role(items, role_of, name_of, limit: int = PIPELINE_ROWS_PER_ROLE) -> list:
    """The items a pipeline page shows: per role, the `limit` first by name (Python's string
    order: the page and the aggregator pick the same nodes)."""
    by_role: dict = {}
    for item in items:
        by_role.setdefault(role_of(item), []).append(item)
    shown = []
    for role in sorted(by_role, key=lambda r: r or ""):
        group = by_role[role]
        if len(group) > limit:
            group = heapq.nsmallest(limit, group, key=name_of)
        else:
            group = sorted(group, key=name_of)
        shown.extend(group)
    return shown


def pipeline_group(pipeline_id: int) -> str:
    return f"pipeline-{int(pipeline_id)}"


def node_group(node_id: int) -> str:
    return f"node-{int(node_id)}"


class NodeRow(TypedDict):
    """One node as the fleet table shows it (compact: 1,000 of these go out twice a second)."""

    id: int
    name: str
    state: str
    role: str | None
    pipeline: int | None
    sim: bool
    kind: str
    power_w: float | None
    src: str | None  # measured-nvml | measured-rapl | modeled | None (no telemetry yet)
    util: float | None
    batch: float | None
    tps: float | None
    acc: float | None
    seen_s: float | None  # seconds since its last sample


class LastMeasured(TypedDict, total=False):
    """The last acceptance figures measured, kept when traffic stops (the live window then has
    none): shown as "last measured N s ago" instead of "—"."""

    acceptance_rate: float | None
    alpha: float | None
    mean_acceptance_length: float | None
    tokens_per_s: float | None  # goodput when it was last seen above 0
    last_measured_at: float  # unix seconds
    age_s: float  # seconds before this message was built


class PipelineSummary(TypedDict):
    id: int
    name: str
    simulated: bool
    drafters: int
    verifiers: int
    stats: dict  # fleet.telemetry.accumulators.derive()
    last_measured: LastMeasured | None


class Kpis(TypedDict):
    """Headline figures of one class of nodes: real ones (`kpis`) or simulated ones
    (`kpis_simulated`), never the two mixed."""

    nodes: int
    states: dict[str, int]  # of these nodes: state -> count
    reporting: int  # nodes with samples in the live window
    tokens_per_s: float | None
    power_w: float | None
    power_source: str | None
    power_draft_w: float | None
    power_verify_w: float | None
    tokens_per_j: float | None
    tokens_per_j_draft: float | None
    tokens_per_j_verify: float | None
    acceptance_rate: float | None
    mean_acceptance_length: float | None
    alpha: float | None
    last_measured: LastMeasured | None


class FleetTotals(TypedDict):
    """Node counts, and figures over ALL nodes, real and simulated (headlines use `kpis`)."""

    nodes: int
    states: dict[str, int]
    power_w: float | None
    power_source: str | None
    tokens_per_s: float | None
    tokens_per_j: float | None
    simulated_nodes: int


class FleetUpdate(TypedDict):
    type: Literal["fleet.update"]
    ts: float  # when the aggregator built it
    newest_ts: float | None  # newest sample it includes (lag = receive time - newest_ts)
    totals: FleetTotals
    kpis: Kpis  # the headline: real nodes only
    kpis_simulated: Kpis  # simulated nodes only, shown apart and labelled
    stats: dict  # derive() over all nodes
    pipelines: list[PipelineSummary]
    nodes: NotRequired[list[NodeRow]]  # absent in the wall's summary


class FleetHead(TypedDict):
    """The headline part of the fleet page's feed (what a snapshot carries besides rows)."""

    ts: float
    newest_ts: float | None
    totals: FleetTotals
    kpis: Kpis
    kpis_simulated: Kpis
    pipes: list[list]  # [[pipeline id, name], ...]


class FleetDelta(TypedDict):
    """The fleet page's message per tick (fleet.telemetry.deltas): only what changed since
    `seq - 1` of the same `epoch`. Rows are lists in deltas.ROW_FIELDS order, figures lists
    in deltas.FIG_FIELDS order; `figs` holds only the rows this socket shows and only the
    ones whose displayed value moved."""

    type: Literal["fleet.update"]
    epoch: str
    seq: int
    ts: float
    newest_ts: float | None
    totals: FleetTotals
    kpis: Kpis
    kpis_simulated: Kpis
    rows: list[list]  # added or changed rows
    gone: list[int]  # ids of nodes that left
    pipes: NotRequired[list[list]]  # every pipeline's [id, name], when one changed
    figs: NotRequired[dict[str, list]]  # node id -> figures


class FleetSnapshot(FleetHead):
    """Every row at `seq`: sent once on subscribing, and again when a client asks."""

    type: Literal["fleet.snapshot"]
    epoch: str
    seq: int
    rows: list[list]


class FleetFigures(TypedDict):
    """The figures of the rows a client has just started to show."""

    type: Literal["fleet.figs"]
    figs: dict[str, list]


class FleetSort(TypedDict):
    """Live figure `key` of every node that has it (fleet.telemetry.fig_order): what a page
    sorted by that figure orders its rows by. `ids[i]` has `vals[i]`; `seen` is an age (s)."""

    type: Literal["fleet.sort"]
    key: str
    ids: list[int]
    vals: list[float]


class PipelineUpdate(TypedDict):
    type: Literal["pipeline.update"]
    ts: float
    newest_ts: float | None
    pipeline: PipelineSummary
    config: dict
    nodes: list[NodeRow]  # the rows the page lists: `shown_per_role`, not the whole pipeline


class NodeUpdate(TypedDict):
    type: Literal["node.update"]
    ts: float
    newest_ts: float | None
    node: NodeRow
    stats: dict
    last_measured: NotRequired[LastMeasured | None]


class ChangeMarker(TypedDict):
    """A configuration change as a chart marker: when, who, what (one short line)."""

    ts: float
    actor: str
    action: str
    text: str


class ConfigChange(TypedDict):
    """Sent by the pipelines' services after commit, to the pipeline's (and node's) group: the
    marker appears and the configuration shows at once, not at the next registry refresh."""

    type: Literal["config.change"]
    pipeline: int | None
    node: int | None
    config: dict | None  # registry.pipeline_config(): k policy, batch caps, version
    marker: ChangeMarker


class Subscribed(TypedDict):
    type: Literal["subscribed"]
    group: str


class ErrorMessage(TypedDict):
    type: Literal["error"]
    code: int
    detail: str


Message = (
    FleetUpdate
    | FleetDelta
    | FleetSnapshot
    | FleetFigures
    | FleetSort
    | PipelineUpdate
    | NodeUpdate
    | ConfigChange
    | Subscribed
    | ErrorMessage
)


def encode(message: Message) -> str:
    return json.dumps(message, separators=(",", ":"), allow_nan=False)


def channel_message(message: Message | str) -> dict:
    """The channel-layer event consumers handle with `telemetry_push`."""
    text = message if isinstance(message, str) else encode(message)
    return {"type": "telemetry.push", "text": text}


async def send(layer, group: str, message: Message | str) -> None:
    """The one way a console message reaches a websocket group."""
    await layer.group_send(group, channel_message(message))
