"""The fleet feed's delta builder (fleet.telemetry.deltas): what one tick sends, pure."""

import json
from typing import Any

import pytest

from fleet.telemetry.deltas import FeedBuilder, figures_of, snapshot_text, with_figures

NOW = 10_000.0


def node(nid: int, **over) -> Any:
    row = {
        "id": nid,
        "name": f"gpu-{nid}",
        "state": "active",
        "role": "verify",
        "pipeline": 1,
        "sim": False,
        "kind": "gpu",
        "power_w": 500.2,
        "src": "measured-nvml",
        "util": 0.731,
        "batch": 16.04,
        "tps": 812.34,
        "acc": 0.6012,
        "seen_s": 0.4,
    }
    row.update(over)
    return row


def summary(ts: float = NOW, pipelines=((1, "chat"),)) -> Any:
    kpis = {"nodes": 2, "power_w": 1000.0}
    return {
        "type": "fleet.update",
        "ts": ts,
        "newest_ts": ts - 0.3,
        "totals": {"nodes": 2, "states": {"active": 2}},
        "kpis": kpis,
        "kpis_simulated": {**kpis, "nodes": 0},
        "stats": {},
        "pipelines": [{"id": pid, "name": name} for pid, name in pipelines],
    }


def started(*nodes) -> FeedBuilder:
    """A builder past its first step (which carries no rows: clients resync on a new epoch)."""
    b = FeedBuilder(epoch="e1")
    b.step(list(nodes), summary(), NOW)
    return b


def test_the_first_step_of_an_epoch_stores_everything_and_sends_no_rows():
    b = FeedBuilder(epoch="e1")
    step = b.step([node(1), node(2)], summary(), NOW)
    assert step.first and step.seq == 1 and step.epoch == "e1"
    msg = json.loads(step.text)
    assert msg["type"] == "fleet.update" and msg["rows"] == [] and msg["gone"] == []
    assert msg["pipes"] == [[1, "chat"]]
    assert set(step.figs) == {1, 2}
    assert json.loads(step.rows or "") == [
        [1, "gpu-1", "active", "verify", 1, 0, "gpu"],
        [2, "gpu-2", "active", "verify", 1, 0, "gpu"],
    ]


def test_figures_below_display_precision_are_not_sent():
    b = started(node(1), node(2))
    # 500.2 W -> 500.4 W, 73.1 % -> 73.4 %, 16.04 -> 16.02: all display the same
    step = b.step(
        [node(1, power_w=500.4, util=0.734, batch=16.02, tps=812.31, acc=0.6014), node(2)],
        summary(NOW + 0.5),
        NOW + 0.5,
    )
    assert step.figs == {} and step.rows is None
    msg = json.loads(step.text)
    assert msg["seq"] == 2 and msg["rows"] == [] and msg["gone"] == [] and "pipes" not in msg
    assert msg["kpis"]["power_w"] == 1000.0  # the headline goes out every tick


@pytest.mark.parametrize(
    "field,value",
    [
        ("power_w", 501.0),  # 500 W -> 501 W
        ("util", 0.74),  # 73 % -> 74 %
        ("batch", 16.2),
        ("tps", 812.5),
        ("acc", 0.6020),  # 60.1 % -> 60.2 %
        ("src", "modeled"),
        ("seen_s", 1.6),  # its last sample is a second older than the clock says: new sample
    ],
)
def test_a_figure_that_moves_on_screen_is_sent(field, value):
    b = started(node(1), node(2))
    step = b.step([node(1, **{field: value}), node(2)], summary(NOW), NOW)
    assert set(step.figs) == {1}
    assert json.loads(step.figs[1]) == figures_of(node(1, **{field: value}), NOW)
    assert json.loads(step.text)["rows"] == []  # a figure is not a row change


def test_large_values_round_as_displayed():
    # from 10 kW watts() shows 0.1 kW; from 10,000 tok/s fmt() shows 0.1 k
    assert figures_of(node(1, power_w=12_345.0, tps=23_456.0), NOW)[0::4] == [12_300, 23_500]
    assert figures_of(node(1, power_w=None, util=None, seen_s=None), NOW)[0:3] == [
        None,
        "measured-nvml",
        None,
    ]


def test_state_changes_adds_and_removes_are_rows_and_gone():
    b = started(node(1), node(2), node(3))
    step = b.step([node(1, state="draining"), node(3), node(4, name="gpu-new")], summary(NOW), NOW)
    msg = json.loads(step.text)
    assert msg["rows"] == [
        [1, "gpu-1", "draining", "verify", 1, 0, "gpu"],
        [4, "gpu-new", "active", "verify", 1, 0, "gpu"],
    ]
    assert msg["gone"] == [2] and step.gone == [2]
    assert set(step.figs) == {4}  # the new node's figures; the others did not move
    assert [r[0] for r in json.loads(step.rows or "")] == [1, 3, 4]  # the snapshot's rows, updated


def test_a_renamed_pipeline_sends_the_names():
    b = started(node(1))
    step = b.step([node(1)], summary(NOW + 1, pipelines=((1, "chat-v2"), (2, "code"))), NOW + 1)
    assert json.loads(step.text)["pipes"] == [[1, "chat-v2"], [2, "code"]]


def test_seq_counts_ticks_and_a_new_builder_is_a_new_epoch():
    b = started(node(1))
    seqs = [json.loads(b.step([node(1)], summary(), NOW).text)["seq"] for _ in range(3)]
    assert seqs == [2, 3, 4]
    other = FeedBuilder()
    assert other.epoch != b.epoch and other.step([node(1)], summary(), NOW).first


def test_snapshot_and_figures_compose_without_decoding():
    b = FeedBuilder(epoch="e1")
    step = b.step([node(1)], summary(), NOW)
    snap = json.loads(snapshot_text(epoch="e1", seq=7, head=step.head, rows=step.rows or ""))
    assert snap["type"] == "fleet.snapshot" and snap["seq"] == 7 and snap["epoch"] == "e1"
    assert snap["ts"] == NOW and snap["pipes"] == [[1, "chat"]] and snap["rows"][0][1] == "gpu-1"
    delta = json.loads(with_figures(step.text, {1: step.figs[1]}))
    assert delta["figs"] == {"1": figures_of(node(1), NOW)} and delta["seq"] == 1
    assert with_figures(step.text, {}) == step.text


def test_10k_rows_where_a_few_move_make_a_small_delta():
    nodes = [node(i) for i in range(10_000)]
    b = started(*nodes)
    nodes[17] = node(17, state="lost")
    nodes[42] = node(42, power_w=640.0)
    step = b.step(nodes, summary(NOW + 0.5), NOW + 0.5)
    assert len(step.text) < 2_000, len(step.text)  # not the ~2 MB of every row
    assert set(step.figs) == {42} and [r[0] for r in json.loads(step.text)["rows"]] == [17]
