"""The live figures' template filters: no deprecated calls (Django 6 drops format_html without
arguments), escaping where a value comes in, and ages said as live.js says them."""

from __future__ import annotations

import warnings

import pytest
from django.utils.safestring import SafeString

from fleet.console.templatetags import live


@pytest.mark.parametrize("source", ["measured-nvml", "measured", "mixed", "modeled"])
def test_source_pill_uses_no_deprecated_call(source):
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        warnings.simplefilter("error", PendingDeprecationWarning)
        html = live.source_pill(source)
    assert isinstance(html, SafeString) and html.startswith('<span class="pill')


def test_source_pill_text():
    assert "measured · NVML" in live.source_pill("measured-nvml")
    assert "partly modeled" in live.source_pill("mixed")
    assert ">modeled<" in live.source_pill("modeled")
    assert live.source_pill(None) == "" and live.source_pill(3) == ""


@pytest.mark.parametrize(
    "seconds,text",
    [
        (0, "0 s ago"),
        (37.5, "38 s ago"),
        (119, "119 s ago"),
        (600, "10 min ago"),
        (9000, "3 h ago"),
    ],
)
def test_ago(seconds, text):
    assert live.ago(seconds) == text


def test_ago_of_nothing_is_a_dash():
    assert live.ago(None) == "—" and live.ago("") == "—"
