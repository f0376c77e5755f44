"""`up` starts TANDEM_AGGREGATORS aggregator processes; a bad value stops it, named."""

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from fleet.telemetry.launch import aggregator_children


def test_one_aggregator_by_default(monkeypatch):
    monkeypatch.delenv("TANDEM_AGGREGATORS", raising=False)
    [child] = aggregator_children(settings)
    assert child.name == "telemetry" and child.argv[-1] == "run_aggregator"


def test_as_many_as_configured(monkeypatch):
    monkeypatch.setenv("TANDEM_AGGREGATORS", "3")
    children = aggregator_children(settings)
    assert [c.name for c in children] == ["telemetry-1", "telemetry-2", "telemetry-3"]


@pytest.mark.parametrize("value", ["0", "-1", "two", "17", ""])
def test_bad_values_fail_loudly(monkeypatch, value):
    monkeypatch.setenv("TANDEM_AGGREGATORS", value)
    with pytest.raises(ImproperlyConfigured, match="TANDEM_AGGREGATORS"):
        aggregator_children(settings)
