"""`inference.bench.draft.alpha` when later draft positions were never accepted (a weak
draft: the per-position accepted list is shorter than the drafted one)."""

from __future__ import annotations

import pytest

from inference.bench.draft import alpha
from inference.engine.counters import SpecCounters


def test_alpha_of_a_draft_whose_later_positions_never_pass():
    c = SpecCounters()
    c.num_draft_tokens_per_pos = [4, 4, 4, 4]
    c.num_accepted_tokens_per_pos = [1]  # one first-position token accepted, nothing after
    # judged: all 4 first positions, then only the 1 round that reached position 2
    assert alpha(c) == pytest.approx(1 / 5)


def test_alpha_when_nothing_was_accepted():
    c = SpecCounters()
    c.num_draft_tokens_per_pos = [3, 3]
    assert alpha(c) == 0.0
