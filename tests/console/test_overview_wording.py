"""The home page's overview counts nodes in English: "1 drafter", "2 verifiers"."""

import re

import pytest
from django.template.loader import render_to_string


def _find(pattern, text, flags=0, group=0):
    """The match of `pattern` in `text` (failing the test when there is none)."""
    match = re.search(pattern, text, flags)
    assert match is not None, f"{pattern!r} not found"
    return match.group(group)


@pytest.mark.parametrize(
    "drafters,verifiers,text",
    [(1, 1, "1 drafter · 1 verifier"), (2, 3, "2 drafters · 3 verifiers"), (0, 1, "0 drafters")],
)
def test_node_counts_are_pluralised(drafters, verifiers, text):
    row = {"id": 1, "name": "p", "drafters": drafters, "verifiers": verifiers, "stats": {}}
    html = render_to_string(
        "console/_overview.html", {"live": {"pipelines": [row], "totals": {}, "stats": {}}}
    )
    cell = _find(r'<td class="c-nodes">(.*?)</td>', html, group=1)
    assert text in cell
