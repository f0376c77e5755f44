"""Partials on the wire: what an aggregator reports to the merge each tick, and the per-shard
rollup sums it leaves for the leader at each bucket close (JSON, compact).

    tandem:agg:partials            stream of tick partials (`Aggregation.partial`), all
                                   aggregators; the leader reads every entry in order
    tandem:agg:rollup:<res>:<start>  hash, field "<shard>" (10 s) or "<shard>:<10 s start>"
                                   (5 min): {"span": s, "groups": [[pipeline|None, sim, Acc]]}.
                                   Written again identically when a shard's bucket is rebuilt
                                   after a takeover, so the leader's sum counts each once.
"""

from __future__ import annotations

import json

from fleet.telemetry.accumulators import SCALARS, Acc

PARTIALS = "tandem:agg:partials"
PARTIALS_MAXLEN = 2000
ROLLUP_PREFIX = "tandem:agg:rollup"
ROLLUP_TTL_S = 3600


def rollup_key(resolution: int, start: float) -> str:
    return f"{ROLLUP_PREFIX}:{resolution}:{int(start)}"


def acc_to_list(acc: Acc) -> list:
    out: list = [getattr(acc, name) for name in SCALARS]
    out += [acc.per_pos, acc.per_pos_drafts, acc.ttft_hist, acc.itl_hist]
    out.append(list(acc.batch_hist.items()))
    return out


def acc_from_list(values: list) -> Acc:
    acc = Acc()
    n = len(SCALARS)
    for name, value in zip(SCALARS, values[:n], strict=True):
        setattr(acc, name, value)
    acc.per_pos, acc.per_pos_drafts, acc.ttft_hist, acc.itl_hist = values[n : n + 4]
    acc.batch_hist = {int(size): count for size, count in values[n + 4]}
    return acc


def encode_partial(partial: dict) -> str:
    return json.dumps(
        {
            **partial,
            "groups": {
                str(shard): [[pid, sim, acc_to_list(acc)] for pid, sim, acc in groups]
                for shard, groups in partial["groups"].items()
            },
            "reporting": {str(k): v for k, v in partial["reporting"].items()},
            "rows": {str(k): v for k, v in partial["rows"].items()},
        },
        separators=(",", ":"),
    )


def decode_partial(raw: bytes | str) -> dict:
    data = json.loads(raw)
    data["groups"] = {
        int(shard): [(pid, sim, acc_from_list(acc)) for pid, sim, acc in groups]
        for shard, groups in data["groups"].items()
    }
    data["reporting"] = {int(k): v for k, v in data["reporting"].items()}
    data["rows"] = {int(k): v for k, v in data["rows"].items()}
    return data


def encode_rollup(span: float, groups: dict) -> str:
    """One shard's bucket: {(pipeline id | None, simulated): Acc} summed over its nodes."""
    return json.dumps(
        {
            "span": span,
            "groups": [[pid, sim, acc_to_list(acc)] for (pid, sim), acc in groups.items()],
        },
        separators=(",", ":"),
    )


def decode_rollup(raw: bytes | str) -> tuple[float, dict]:
    data = json.loads(raw)
    return data["span"], {(pid, sim): acc_from_list(acc) for pid, sim, acc in data["groups"]}
