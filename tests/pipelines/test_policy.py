"""k_for: the one function workers ask for k."""

import pytest

from fleet.pipelines.policy import PolicyError, k_for, validate_policy


def test_fixed():
    assert k_for({"mode": "fixed", "k": 5}, 1) == 5
    assert k_for({"mode": "fixed", "k": 0}, 64) == 0


def test_table_by_batch_size():
    policy = {"mode": "table", "table": [[16, 2], [1, 6], [4, 4]]}  # unsorted on purpose
    assert [k_for(policy, b) for b in (1, 2, 4, 5, 16, 17, 500)] == [6, 4, 4, 2, 2, 2, 2]


def test_adaptive_policy_starts_at_its_k():
    """The round-by-round choice is the drafter's (tests/planner/test_adaptive_k.py)."""
    assert k_for({"mode": "adaptive", "k_min": 0, "k_max": 3, "k": 2}, 8) == 2


def test_malformed_policy_falls_back_to_plain_decoding():
    assert k_for({"mode": "weird"}, 1) == 0
    assert k_for(None, 1) == 0


@pytest.mark.parametrize(
    "policy,field",
    [
        ({"mode": "fixed", "k": -1}, "k"),
        ({"mode": "fixed", "k": True}, "k"),
        ({"mode": "table", "table": []}, "table"),
        ({"mode": "table", "table": [[1, 2], [1, 3]]}, "table"),
        ({"mode": "adaptive", "k_min": 5, "k_max": 2}, "k_min"),
        ({"mode": "x"}, "mode"),
    ],
)
def test_validate_reports_the_field(policy, field):
    with pytest.raises(PolicyError) as exc:
        validate_policy(policy)
    assert exc.value.field == field


def test_policy_module_imports_no_django_models():
    """Workers import it without Django settings (the fleet package itself pulls in celery,
    which loads a few django.utils helpers; no ORM, no app models)."""
    import subprocess
    import sys

    code = (
        "import sys, fleet.pipelines.policy; "
        "print(any(m.startswith(('django.db', 'fleet.pipelines.models')) for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
