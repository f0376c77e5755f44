"""The k policy: how many draft tokens per round. Pure Python, imported by the workers
(no Django models here).

Policies (JSON, stored on the pipeline):
- ``{"mode": "fixed", "k": 4}``
- ``{"mode": "table", "table": [[max_batch, k], ...]}``: the first row whose max_batch is
  >= the batch size wins; above the last row, the last row's k.
- ``{"mode": "adaptive", "k_min": 0, "k_max": 8, "k": 4}``: the drafter chooses k every
  round by *predicted goodput* from its measured acceptance and step costs
  (`fleet.planner.adaptive`), k = 0 (plain decoding) always a candidate; "k" is where it
  starts before anything is measured.
"""

from __future__ import annotations

MAX_K = 16
MODES = ("fixed", "table", "adaptive")


class PolicyError(ValueError):
    """An invalid k policy; `field` names the offending key."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(message)


def _int(value, field: str, lo: int = 0, hi: int = MAX_K) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise PolicyError(field, f"{field} must be an integer")
    if not lo <= value <= hi:
        raise PolicyError(field, f"{field} must be between {lo} and {hi}")
    return value


def validate_policy(policy) -> dict:
    """Return a normalized copy of `policy`, or raise PolicyError."""
    if not isinstance(policy, dict):
        raise PolicyError("k_policy", "k_policy must be an object")
    mode = policy.get("mode")
    if mode not in MODES:
        raise PolicyError("mode", f"mode must be one of {', '.join(MODES)}")
    if mode == "fixed":
        return {"mode": "fixed", "k": _int(policy.get("k"), "k")}
    if mode == "table":
        table = policy.get("table")
        if not isinstance(table, list) or not table:
            raise PolicyError("table", "table must be a non-empty list of [max_batch, k]")
        rows = []
        for row in table:
            if not isinstance(row, list | tuple) or len(row) != 2:
                raise PolicyError("table", "each table row must be [max_batch, k]")
            rows.append([_int(row[0], "max_batch", 1, 1 << 20), _int(row[1], "k")])
        rows.sort()
        if len({r[0] for r in rows}) != len(rows):
            raise PolicyError("table", "max_batch values must be distinct")
        return {"mode": "table", "table": rows}
    k_min = _int(policy.get("k_min", 0), "k_min")
    k_max = _int(policy.get("k_max", 8), "k_max")
    if k_min > k_max:
        raise PolicyError("k_min", "k_min must not exceed k_max")
    k = _int(policy.get("k", min(max(4, k_min), k_max)), "k")
    return {"mode": "adaptive", "k_min": k_min, "k_max": k_max, "k": min(max(k, k_min), k_max)}


def k_for(policy: dict | None, batch_size: int) -> int:
    """The k a fixed or table policy gives a batch of `batch_size` sequences; an adaptive
    policy's starting k (the drafter's `fleet.planner.adaptive.AdaptiveK` moves it from
    there, round by round, on measured goodput). Never raises on a malformed policy: it
    falls back to k = 0 (plain decoding is always correct)."""
    try:
        policy = validate_policy(policy)
    except PolicyError:
        return 0
    mode = policy["mode"]
    if mode == "table":
        for max_batch, k in policy["table"]:
            if batch_size <= max_batch:
                return k
        return policy["table"][-1][1]
    return policy["k"]
