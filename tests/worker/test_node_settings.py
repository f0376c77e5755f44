"""A node worker's settings come from the environment through fleet.env: a bad value stops it
with an ImproperlyConfigured naming the variable, instead of a bare ValueError or a silent
default."""

import pytest
from django.core.exceptions import ImproperlyConfigured

from fleet.env import env_float, env_is_set
from inference.worker import engine_cache


def test_node_sizes_are_read_and_bad_values_named(monkeypatch):
    monkeypatch.setenv("TANDEM_NODE_SLOTS", "12")
    monkeypatch.setenv("TANDEM_KV_MEMORY_FRACTION", "0.5")
    monkeypatch.delenv("TANDEM_KV_BYTES", raising=False)
    assert engine_cache.n_slots() == 12
    assert engine_cache.kv_budget() == {"budget_bytes": None, "memory_fraction": 0.5}
    for name, bad in [
        ("TANDEM_NODE_SLOTS", "lots"),
        ("TANDEM_NODE_SLOTS", "0"),
        ("TANDEM_KV_MEMORY_FRACTION", "1.5"),
        ("TANDEM_KV_BYTES", "-1"),
    ]:
        monkeypatch.setenv(name, bad)
        with pytest.raises(ImproperlyConfigured, match=name):
            engine_cache.n_slots() if name == "TANDEM_NODE_SLOTS" else engine_cache.kv_budget()
        monkeypatch.delenv(name)


def test_env_float_refuses_what_is_not_a_finite_number_in_range(monkeypatch):
    assert env_float("TANDEM_TEST_FLOAT", None) is None
    assert not env_is_set("TANDEM_TEST_FLOAT")
    monkeypatch.setenv("TANDEM_TEST_FLOAT", "2.5")
    assert env_is_set("TANDEM_TEST_FLOAT")
    assert env_float("TANDEM_TEST_FLOAT", 1.0, minimum=0) == 2.5
    for bad in ("nan", "inf", "fast", "-1"):
        monkeypatch.setenv("TANDEM_TEST_FLOAT", bad)
        with pytest.raises(ImproperlyConfigured, match="TANDEM_TEST_FLOAT"):
            env_float("TANDEM_TEST_FLOAT", 1.0, minimum=0)
