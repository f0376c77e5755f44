"""Formatting of modeled figures on the planner pages: grouped digits, signed differences."""

from __future__ import annotations

from django import template

register = template.Library()


def _number(value) -> float | None:
    try:
        return None if value is None or value == "" else float(value)
    except (TypeError, ValueError):
        return None


@register.filter
def figure(value, digits=1):
    """1234.567 -> "1,234.6" (a dash for none)."""
    v = _number(value)
    return "—" if v is None else f"{v:,.{int(digits)}f}"


@register.filter
def signed_pct(value, digits=1):
    """12.34 (a percentage) -> "+12.3 %"; a dash for none."""
    v = _number(value)
    return "—" if v is None else f"{v:+.{int(digits)}f} %"


@register.filter
def delta(pair, digits=1):
    """(before, after) -> "+1,234.5 (+12.3 %)": the change and its share of before."""
    before, after = (_number(x) for x in pair) if pair else (None, None)
    if before is None or after is None:
        return "—"
    change = after - before
    text = f"{change:+,.{int(digits)}f}"
    if before:
        text += f" ({change / abs(before) * 100:+.1f} %)"
    return text
