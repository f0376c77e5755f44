"""WCAG 2.x contrast of the console's text colours, read from static/css/tandem.css itself:
normal text needs 4.5:1 (AA). Dim text and the label of primary buttons once sat near 3:1."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

CSS = Path(__file__).resolve().parents[2] / "static" / "css" / "tandem.css"
AA = 4.5


def _css() -> str:
    return re.sub(r"/\*.*?\*/", "", CSS.read_text(), flags=re.S)


def _rule(selector: str) -> dict[str, str]:
    """The declarations of the first rule whose selector list is exactly `selector`."""
    for selectors, body in re.findall(r"([^{}]+)\{([^{}]*)\}", _css()):
        if [s.strip() for s in selectors.split(",")] == [selector]:
            return {
                k.strip(): v.strip()
                for k, _, v in (d.partition(":") for d in body.split(";"))
                if k.strip()
            }
    raise AssertionError(f"no rule {selector!r} in {CSS}")


def _colour(value: str, props: dict[str, str]) -> tuple[int, int, int]:
    value = value.strip()
    ref = re.fullmatch(r"var\((--[\w-]+)\)", value)
    if ref:
        return _colour(props[ref.group(1)], props)
    if value == "#fff" or value == "white":
        value = "#ffffff"
    hexed = re.fullmatch(r"#([0-9a-fA-F]{6})", value)
    assert hexed, f"cannot read colour {value!r}"
    h = hexed.group(1)
    return int(h[0:2], 16), int(h[2:4], 16), int(h[4:6], 16)


def _luminance(rgb: tuple[int, int, int]) -> float:
    def channel(c: int) -> float:
        s = c / 255
        return s / 12.92 if s <= 0.03928 else ((s + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(c) for c in rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: tuple[int, int, int], b: tuple[int, int, int]) -> float:
    la, lb = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def test_contrast_formula_matches_known_pairs():
    assert contrast((0, 0, 0), (255, 255, 255)) == pytest.approx(21.0)
    assert contrast((0x77, 0x77, 0x77), (255, 255, 255)) == pytest.approx(4.48, abs=0.01)


@pytest.mark.parametrize("background", ["--bg", "--bg-raised", "--bg-card", "--bg-hover"])
@pytest.mark.parametrize("text", ["--text", "--text-muted", "--text-dim"])
def test_text_colours_pass_aa_on_every_surface(text, background):
    props = _rule(":root")
    ratio = contrast(_colour(props[text], props), _colour(props[background], props))
    assert ratio >= AA, f"{text} on {background}: {ratio:.2f}:1 < {AA}:1"


@pytest.mark.parametrize("state", [".btn-primary", ".btn-primary:hover"])
def test_primary_button_label_passes_aa(state):
    props = _rule(":root")
    base = _rule(".btn-primary")
    rule = {**base, **_rule(state)}
    ratio = contrast(_colour(rule["color"], props), _colour(rule["background"], props))
    assert ratio >= AA, f"{state}: {ratio:.2f}:1 < {AA}:1"


@pytest.mark.parametrize("background", ["--bg", "--bg-card", "--bg-hover"])
@pytest.mark.parametrize(
    "text", ["--accent", "--green", "--amber", "--red", "--gray", "--violet", "--cyan"]
)
def test_coloured_text_passes_aa(text, background):
    """Links, state badges, pills and danger buttons write in these colours."""
    props = _rule(":root")
    ratio = contrast(_colour(props[text], props), _colour(props[background], props))
    assert ratio >= AA, f"{text} on {background}: {ratio:.2f}:1 < {AA}:1"
