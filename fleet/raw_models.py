"""`list(Model.objects.raw(sql, params))`, with the query's setup done once per connection.

On the path of every generation (the API key's owner, twice; the pipeline; the router's
nodes; a stream's owner) a `RawQuerySet` spent more CPU working out, for every call, which
column feeds which field and which database converters apply than it spent reading the
rows. Those depend only on the model, the columns the SQL returns and the connection: here
they are worked out once per connection (Django's connections are per thread; the web
process's sync lanes keep theirs) and reused. The instances are the ones `raw()` builds:
fields converted, other columns set as attributes unconverted (tests/test_raw_models.py
holds the two equal).
"""

from __future__ import annotations

from typing import Any, TypeVar

from django.core import exceptions
from django.db import connections, router
from django.db.models import Model

M = TypeVar("M", bound=Model)

_PLANS = "_tandem_raw_plans"


class _Plan:
    """Where each field's value sits in a row, the converters of the row's columns, and the
    columns that are no field of the model (set as attributes, as `raw()` does)."""

    def __init__(self, model: type[Model], columns: tuple[str, ...], connection):
        convert = connection.introspection.identifier_converter
        by_column = {convert(f.column): f for f in model._meta.fields}
        init_fields = [f for f in model._meta.fields if convert(f.column) in columns]
        self.names = [f.attname for f in init_fields]
        if model._meta.pk.attname not in self.names:
            raise exceptions.FieldDoesNotExist("Raw query must include the primary key")
        self.positions = [columns.index(convert(f.column)) for f in init_fields]
        self.extras = [(c, i) for i, c in enumerate(columns) if c not in by_column]
        fields = [by_column.get(c) for c in columns]
        cols = [f.get_col(f.model._meta.db_table) if f else None for f in fields]
        self.compiler = connection.ops.compiler("SQLCompiler")(None, connection, None)
        self.converters = self.compiler.get_converters(cols)


def raw_instances(
    model: type[M], sql: str, params: list[Any], *, using: str | None = None
) -> list[M]:
    """The instances `model.objects.raw(sql, params)` yields, as a list."""
    db = using or router.db_for_read(model)
    connection = connections[db]
    params = [connection.ops.adapt_unknown_value(v) for v in params]  # as RawQuery does
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        convert = connection.introspection.identifier_converter
        columns = tuple(convert(d[0]) for d in cursor.description)
        rows = cursor.fetchall()
    plans = connection.__dict__.setdefault(_PLANS, {})
    plan = plans.get((model, columns))
    if plan is None:
        plan = plans[(model, columns)] = _Plan(model, columns, connection)
    if plan.converters:
        rows = plan.compiler.apply_converters(rows, plan.converters)
    out = []
    for values in rows:
        instance = model.from_db(db, plan.names, [values[i] for i in plan.positions])
        for column, i in plan.extras:
            setattr(instance, column, values[i])
        out.append(instance)
    return out


_INSERTS = "_tandem_raw_inserts"


def insert_instance(instance: Model, *, using: str | None = None) -> None:
    """`instance.save(force_insert=True)` as ONE INSERT of every concrete field, its SQL built
    once per connection (the ORM compiles it again for every row: on the path of every
    generation, more CPU than SQLite spent running it). For models whose primary key is set
    in Python (no auto field), with no parents and no save signals to send."""
    model = type(instance)
    meta = model._meta
    if meta.auto_field is not None or meta.parents:
        raise TypeError(f"insert_instance: {model.__name__} has an auto field or parents")
    db = using or router.db_for_write(model)
    connection = connections[db]
    fields = [f for f in meta.local_concrete_fields if f.column]  # (concrete: all of them)
    inserts = connection.__dict__.setdefault(_INSERTS, {})
    sql = inserts.get(model)
    if sql is None:
        quote = connection.ops.quote_name
        columns = ", ".join(quote(f.column) for f in fields if f.column)  # (for mypy)
        marks = ", ".join(["%s"] * len(fields))
        sql = inserts[model] = f"INSERT INTO {quote(meta.db_table)} ({columns}) VALUES ({marks})"
    params = [f.get_db_prep_save(f.pre_save(instance, True), connection) for f in fields]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
    instance._state.adding = False
    instance._state.db = db
