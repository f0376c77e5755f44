"""Formatting of live figures in server-rendered pages (the same as static/js/live.js)."""

import math

from django import template
from django.utils.html import format_html
from django.utils.safestring import mark_safe

from fleet.telemetry.aggregation import LIVE_WINDOW_S
from fleet.telemetry.merge import ROLLUP_S

register = template.Library()


def _float(value) -> float | None:
    """Missing figures (None, "" from an absent snapshot key) render as a dash."""
    try:
        return None if value is None or value == "" else float(value)
    except (TypeError, ValueError):
        return None


@register.filter
def num(value, digits=1):
    value = _float(value)
    return "—" if value is None else f"{value:,.{int(digits)}f}"


@register.filter
def pct(value, digits=1):
    value = _float(value)
    return "—" if value is None else f"{value * 100:.{int(digits)}f}%"


@register.filter
def watts(value):
    value = _float(value)
    if value is None:
        return "—"
    return f"{value / 1000:.1f} kW" if value >= 10000 else f"{value:.0f} W"


@register.filter
def source_pill(source):
    if not source or not isinstance(source, str):
        return ""
    if source.startswith("measured"):
        sensor = f" · {source.split('-', 1)[1].upper()}" if "-" in source else ""
        return format_html(
            '<span class="pill pill-measured" title="Measured power">measured{}</span>', sensor
        )
    if source == "mixed":
        return mark_safe(  # constant markup: nothing to escape
            '<span class="pill pill-modeled" title="Part of this power is modeled from '
            'hardware profiles">partly modeled</span>'
        )
    return mark_safe(  # constant markup: nothing to escape
        '<span class="pill pill-modeled" title="Modeled from the hardware profile and '
        'utilization">modeled</span>'
    )


@register.filter
def ago(seconds):
    """An age in seconds as people say it ("12 s ago", "5 min ago", "3 h ago"), as live.js."""
    value = _float(seconds)
    if value is None:
        return "—"
    s = _js_round(max(0.0, value))
    if s < 120:
        return f"{s} s ago"
    return f"{_js_round(s / 60)} min ago" if s < 7200 else f"{_js_round(s / 3600)} h ago"


def _js_round(value: float) -> int:
    """Math.round: halves go up (Python's round() goes to the even neighbour)."""
    return math.floor(value + 0.5)


@register.filter
def get(mapping, key):
    if not mapping:
        return None
    return mapping.get(key) if hasattr(mapping, "get") else None


@register.simple_tag
def kpi_window(last=False):
    """The window a live acceptance figure covers, beside its label: the aggregator's live
    window (the samples of the last few seconds, so it swings) or, once traffic stops, the
    rollup bucket the "last measured" figure comes from. live.js `windowLabel` switches it."""
    live = f"last {LIVE_WINDOW_S:g} s"
    rollup = f"{ROLLUP_S} s rollup"
    return format_html(
        '<span class="kpi-window" data-window data-live="{}" data-rollup="{}" '
        'title="The figure covers this window">{}</span>',
        live,
        rollup,
        rollup if last else live,
    )
