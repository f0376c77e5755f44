"""The fleet table by a live figure (fleet.telemetry.fig_order): the column read from the stored
figures, and the first rows' order (the rule static/js/fleet_sort.js follows too)."""

import json

import pytest

from fleet.telemetry.deltas import FIG_FIELDS
from fleet.telemetry.fig_order import SORT_FIGS, column, first


def _fig(**values) -> bytes:
    """A stored figures list (deltas.figures_of's shape) as the hash holds it: JSON bytes."""
    return json.dumps([values.get(f) for f in FIG_FIELDS]).encode()


def test_every_live_column_of_the_table_sorts():
    assert set(SORT_FIGS) == {"power", "util", "batch", "tps", "acc", "seen"}


def test_the_column_has_the_nodes_with_the_figure_and_ages_for_seen():
    stored = {
        b"1": _fig(power_w=500, tps=812.5, seen=1000),
        b"2": _fig(power_w=60, tps=None, seen=990),
        b"3": _fig(),  # no sample yet
    }
    assert column(stored, "tps", now=1003.0) == {1: 812.5}
    assert column(stored, "power", now=1003.0) == {1: 500, 2: 60}
    assert column(stored, "seen", now=1003.4) == {1: 3, 2: 13}  # ages, not the seconds
    assert column({}, "acc", now=0.0) == {}
    assert column({"4": json.dumps([1, None, 0.5])}, "util", now=0.0) == {4: 0.5}
    assert column({"5": "[1]"}, "acc", now=0.0) == {}  # a short list has no such figure


ROWS = [
    (1, "b-verify", "verify"),
    (2, "a-verify", "verify"),
    (3, "c-verify", "verify"),
    (4, "d-draft", "draft"),
    (5, "a-new", None),
    (6, "e-draft", "draft"),
]


@pytest.mark.parametrize("descending", [True, False])
def test_nodes_without_the_figure_come_last_both_ways_and_ties_go_by_name(descending):
    values = {1: 700.0, 2: 500.0, 3: 700.0, 4: 0.0, 6: 12.0}
    order = first(ROWS, values, "tps", descending=descending, n=10)
    having = [6, 2, 1, 3] if not descending else [1, 3, 2, 6]  # 1 and 3 tie: by name
    # 4 is a drafter at 0 tokens/s (the table shows "—"), 5 has no sample: both last, by name
    assert order == [*having, 5, 4]


def test_a_drafters_other_figures_and_a_verifiers_zero_sort_as_figures():
    values = {1: 0.0, 4: 0.0}
    assert first(ROWS, values, "tps", descending=False, n=2) == [1, 5]  # then by name
    assert first(ROWS, values, "power", descending=False, n=2) == [1, 4]


def test_only_the_first_n_are_returned():
    values = {nid: float(nid) for nid in range(1, 4)}
    assert first(ROWS, values, "acc", descending=True, n=2) == [3, 2]
    assert first(ROWS, values, "acc", descending=True, n=5) == [3, 2, 1, 5, 4]
