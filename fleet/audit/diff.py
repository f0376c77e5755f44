"""The audit log as people read it: one line per changed field, `label: old → new`, values
in the console's own words (k policies as `k=4`, missing values as `—`), not Python reprs."""

from __future__ import annotations

from typing import Any, TypedDict

LABELS = {
    "target_model": "target model",
    "drafter_kind": "drafter",
    "draft_model": "draft model",
    "k_policy": "k policy",
    "max_verify_batch": "max verify batch",
    "max_batch_wait_ms": "max batch wait (ms)",
    "slo_itl_p99_ms": "ITL p99 SLO (ms)",
    "slo_ttft_p99_ms": "TTFT p99 SLO (ms)",
    "power_budget_w": "power budget (W)",
    "auto_mode": "auto mode",
    "auto_bounds": "auto bounds",
    "restored_version": "restored version",
}


class Change(TypedDict):
    field: str
    label: str
    old: str | None  # None: the field had no value before (a creation)
    new: str | None  # None: the field has none after (a removal)


def k_policy_text(policy: Any) -> str:
    if not isinstance(policy, dict):
        return text(policy)
    mode = policy.get("mode")
    if mode == "fixed":
        return f"k={policy.get('k')}"
    if mode == "table":
        rows = ", ".join(f"b≤{b}:k={k}" for b, k in policy.get("table") or [])
        return f"table {rows}"
    if mode == "adaptive":
        return f"adaptive k∈[{policy.get('k_min')},{policy.get('k_max')}]"
    return _mapping(policy)


def _mapping(value: dict) -> str:
    return ", ".join(f"{k}={text(v)}" for k, v in value.items()) or "—"


def text(value: Any, field: str = "") -> str:
    if field == "k_policy":
        return k_policy_text(value)
    if field == "restored_version":
        return f"v{value}"
    if value is None or value == "":
        return "—"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, dict):
        return _mapping(value)
    if isinstance(value, list):
        if all(isinstance(v, dict) and "name" in v for v in value):  # placements
            return ", ".join(f"{v['name']} ({v.get('role', '?')})" for v in value) or "none"
        return ", ".join(text(v) for v in value) or "none"
    return str(value)


def changes(before: dict, after: dict) -> list[Change]:
    """The fields an event touched, in the order it wrote them."""
    fields = list(dict.fromkeys([*after, *before]))
    return [
        Change(
            field=f,
            label=LABELS.get(f, f.replace("_", " ")),
            old=text(before[f], f) if f in before else None,
            new=text(after[f], f) if f in after else None,
        )
        for f in fields
    ]


# --- one short line per change: the chart markers' hover text -------------------------------


def describe_change(action: str, before: dict, after: dict, node: str | None = None) -> str:
    """`k 4 → 2`, `max_verify_batch 16 → 32`, `gpu-3 moved chat → code (verify)`: what a
    change did, in one short line; a change to a node names it."""
    if node:
        said = _node_change(action, before or {}, after or {}, node)
        if said:
            return said
    parts = []
    for key in list(after)[:4]:
        old, new = (before or {}).get(key), after.get(key)
        if key == "k_policy":
            parts.append(f"k {_k_text(old)} → {_k_text(new)}")
        elif isinstance(new, (dict, list)) or isinstance(old, (dict, list)):
            parts.append(f"{key} changed")
        else:
            parts.append(f"{key} {_short(old)} → {_short(new)}")
    return "; ".join(parts) or action.replace("_", " ")


def _node_change(action: str, before: dict, after: dict, node: str) -> str | None:
    role, old_role = after.get("role"), before.get("role")
    if action == "move":
        roles = f"{old_role} → {role}" if old_role and old_role != role else f"{role}"
        return f"{node} moved {before.get('pipeline')} → {after.get('pipeline')} ({roles})"
    if action == "place":
        was = f" (was {old_role})" if old_role else ""
        return f"{node} placed as {role}{was}"
    if action == "unplace":
        return f"{node} removed from {before.get('pipeline')}"
    if action == "drain":
        return f"{node} draining"
    if action == "return":
        return f"{node} back in service"
    return None


def _k_text(policy) -> str:
    if not isinstance(policy, dict):
        return "—"
    if policy.get("mode") == "fixed":
        return str(policy.get("k"))
    return str(policy.get("mode", "—"))


def _short(value) -> str:
    shown = "—" if value is None else str(value)
    return shown if len(shown) <= 40 else shown[:39] + "…"
