"""What a node's agent says about its device (`Node.device_info`, from its heartbeat) as
labelled figures with units, for pages. Keys this module does not know are still shown,
under their own name, after the known ones."""

from __future__ import annotations

from typing import Any, TypedDict


class Fact(TypedDict):
    key: str
    label: str
    value: str
    unit: str


# key -> (label, unit); in the order a page shows them
KNOWN: dict[str, tuple[str, str]] = {
    "name": ("Device", ""),
    "kind": ("Kind", ""),
    "device": ("Torch device", ""),
    "memory_gb": ("Device memory", "GB"),
    "cores": ("CPU cores", "cores"),
    "threads": ("Torch threads", "threads"),
    "torch": ("PyTorch", ""),
    "host": ("Host", ""),
    "pid": ("Process id", ""),
}
KINDS = {"gpu": "GPU", "cpu": "CPU"}


def _value(key: str, value: Any) -> str:
    if key == "kind":
        return KINDS.get(str(value), str(value))
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.1f}"
    if isinstance(value, int):
        return f"{value:,}" if key != "pid" else str(value)
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return str(value)


def device_facts(info: dict | None) -> list[Fact]:
    if not isinstance(info, dict):
        return []
    keys = [k for k in KNOWN if k in info] + [k for k in info if k not in KNOWN]
    facts = []
    for key in keys:
        if info[key] is None or info[key] == "":
            continue
        label, unit = KNOWN.get(key, (key.replace("_", " ").capitalize(), ""))
        facts.append(Fact(key=key, label=label, value=_value(key, info[key]), unit=unit))
    return facts
