"""fleet.raw_models.raw_instances builds what `Model.objects.raw()` builds, with the query's
setup worked out once per connection."""

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import FieldDoesNotExist
from django.db import connections

from fleet import raw_models
from fleet.accounts.models import ApiKey
from fleet.accounts.services import api_key_create
from fleet.pipelines.models import Pipeline
from fleet.raw_models import raw_instances

pytestmark = pytest.mark.django_db


def _state(instance) -> dict:
    return {k: v for k, v in vars(instance).items() if k != "_state"}


def _same(model, sql, params) -> list:
    ours = raw_instances(model, sql, params)
    theirs = list(model.objects.raw(sql, params))
    assert [type(i) for i in ours] == [type(i) for i in theirs]
    assert [_state(i) for i in ours] == [_state(i) for i in theirs]
    assert [i.get_deferred_fields() for i in ours] == [i.get_deferred_fields() for i in theirs]
    assert [i._state.db for i in ours] == [i._state.db for i in theirs]
    assert all(not i._state.adding for i in ours)
    return ours


def test_fields_converted_and_extra_columns_left_as_the_database_gives_them(operator):
    api_key_create(user=operator, name="k")
    User = get_user_model()
    sql = (
        f"SELECT u.*, k.id AS key_id, k.created_at AS key_created FROM {User._meta.db_table} u "
        f"JOIN {ApiKey._meta.db_table} k ON k.user_id = u.id WHERE u.username = %s"
    )
    (user,) = _same(User, sql, ["bob"])
    assert user.date_joined.tzinfo is not None  # a field: converted
    assert user.key_id is not None


def test_json_fields_and_a_partial_select():
    Pipeline.objects.create(
        name="p", target_model="t", draft_model="d", k_policy={"mode": "fixed", "k": 3}
    )
    table = Pipeline._meta.db_table
    (full,) = _same(Pipeline, f"SELECT * FROM {table} WHERE name = %s", ["p"])
    assert full.k_policy == {"mode": "fixed", "k": 3}
    (part,) = _same(Pipeline, f"SELECT id, name FROM {table} WHERE name = %s", ["p"])
    assert "k_policy" in part.get_deferred_fields()
    assert _same(Pipeline, f"SELECT * FROM {table} WHERE name = %s", ["none"]) == []


def test_the_primary_key_is_required_as_raw_requires_it():
    table = Pipeline._meta.db_table
    with pytest.raises(FieldDoesNotExist):
        raw_instances(Pipeline, f"SELECT name FROM {table}", [])


def test_the_setup_is_worked_out_once_per_query_shape(monkeypatch):
    Pipeline.objects.create(name="p", target_model="t", draft_model="d")
    built = []
    plan = raw_models._Plan

    def counted(*args):
        built.append(args)
        return plan(*args)

    monkeypatch.setattr(raw_models, "_Plan", counted)
    connections["default"].__dict__.pop(raw_models._PLANS, None)
    table = Pipeline._meta.db_table
    for _ in range(3):
        raw_instances(Pipeline, f"SELECT * FROM {table} WHERE name = %s", ["p"])
    raw_instances(Pipeline, f"SELECT id, name FROM {table}", [])
    assert len(built) == 2
