"""Cursor pagination of the node list: every page costs one query, however deep.

DRF's CursorPagination keys on the first ordering field and counts an offset past its
duplicates; ordered by `state` (five values over 10,000 nodes) that offset is thousands of
rows. Here the cursor is the last row's (ordering value, id) pair and the next page is a
keyset query `(value, id) > (v, id)`, with `id` as the tie-breaker: stable under inserts and
deletes, no COUNT, no OFFSET. NULLs (`last_seen` of a node that never reported) sort last
either way.

`?limit=` sets the page size (at most MAX_PAGE_SIZE); `?ordering=` one of the view's
`ordering_fields`, `-` for descending; `?cursor=` is opaque (base64 JSON). An `?offset=` is
refused: follow `next` and `previous`.
"""

from __future__ import annotations

import base64
import json
from datetime import datetime

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import F, Q
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import BasePagination, CursorPagination
from rest_framework.response import Response
from rest_framework.utils.urls import remove_query_param, replace_query_param

from fleet.guard.rest import MAX_PAGE_SIZE


def _encode(payload: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(payload, separators=(",", ":")).encode()).decode()


def _decode(raw: str, ordering: str) -> dict:
    """The cursor's position; 400 for anything this list did not give out for `ordering`
    (a tampered value must not reach the query as a dict, nor one order's value another's)."""
    try:
        payload = json.loads(base64.urlsafe_b64decode(raw.encode() + b"==="))
        if (
            not isinstance(payload, dict)
            or type(payload.get("id")) is not int
            or payload.get("o") != ordering
            or not isinstance(payload.get("v"), str | int | type(None))
            or isinstance(payload.get("v"), bool)
        ):
            raise ValueError
        return payload
    except (ValueError, UnicodeError, TypeError) as exc:
        raise ValidationError({"cursor": ["Not a cursor this list gave out."]}) from exc


def after(
    field: str, value, pk: int, *, descending: bool, nulls_last: bool, nullable: bool = True
) -> Q:
    """Rows strictly after (value, pk) in the order `field` (desc or asc), then id the same
    way, with NULLs of `field` as one block at the end (`nulls_last`) or the start. For a
    field that cannot be NULL (`nullable=False`) the NULL terms are left out, so the database
    can walk an index on the field."""
    cmp = "lt" if descending else "gt"
    if value is None:
        in_nulls = Q(**{f"{field}__isnull": True, f"pk__{cmp}": pk})
        return in_nulls if nulls_last else in_nulls | Q(**{f"{field}__isnull": False})
    beyond = Q(**{f"{field}__{cmp}": value}) | Q(**{field: value, f"pk__{cmp}": pk})
    if nullable and nulls_last:
        return beyond | Q(**{f"{field}__isnull": True})
    return beyond


class KeysetCursorPagination(BasePagination):
    """See the module docstring. The view supplies `ordering_fields` and `ordering`."""

    page_size = 50
    max_page_size = MAX_PAGE_SIZE
    cursor_query_param = "cursor"
    page_size_query_param = "limit"
    ordering_query_param = "ordering"

    def ordering_of(self, request, view) -> tuple[str, bool]:
        allowed = set(getattr(view, "ordering_fields", ()))
        raw = request.query_params.get(self.ordering_query_param, "").strip()
        if not raw:
            default = (getattr(view, "ordering", None) or ["pk"])[0]
            raw = default
        field = raw.lstrip("-")
        if field not in allowed | {"pk", "id"} or raw.count("-") > 1 or "," in raw:
            raise ValidationError(
                {self.ordering_query_param: [f"One of {', '.join(sorted(allowed))}, or -name."]}
            )
        return ("pk" if field == "id" else field), raw.startswith("-")

    def get_page_size(self, request) -> int:
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return self.page_size
        try:
            size = int(raw)
        except ValueError:
            raise ValidationError({self.page_size_query_param: ["A whole number."]}) from None
        if size < 1:
            raise ValidationError({self.page_size_query_param: ["At least 1."]})
        return min(size, self.max_page_size)

    def paginate_queryset(self, queryset, request, view=None):
        if "offset" in request.query_params:
            raise ValidationError({"offset": ["This list pages by cursor: follow `next`."]})
        self.request = request
        field, descending = self.ordering_of(request, view)
        size = self.get_page_size(request)
        raw = request.query_params.get(self.cursor_query_param)
        self.ordering = f"{'-' if descending else ''}{field}"
        cursor = _decode(raw, self.ordering) if raw else None
        backwards = bool(cursor and cursor.get("r"))
        # walking back is the same query in the reverse order, read then flipped
        desc = descending != backwards
        nulls_last = not backwards
        model_field = queryset.model._meta.pk if field == "pk" else None
        model_field = model_field or queryset.model._meta.get_field(field)
        nullable = model_field.null
        if cursor is not None:
            value = cursor.get("v")
            if value is not None:
                try:  # the field's own parsing: an ISO time, a number for the id
                    value = model_field.to_python(value)
                except DjangoValidationError as exc:
                    raise ValidationError({"cursor": ["Not a cursor this list gave out."]}) from exc
            queryset = queryset.filter(
                after(
                    field,
                    value,
                    cursor["id"],
                    descending=desc,
                    nulls_last=nulls_last,
                    nullable=nullable,
                )
            )
        # NULLS LAST/FIRST only where there can be NULLs: a plain ORDER BY walks an index
        nulls = ({"nulls_last": True} if nulls_last else {"nulls_first": True}) if nullable else {}
        key = F(field).desc(**nulls) if desc else F(field).asc(**nulls)
        tie = F("pk").desc() if desc else F("pk").asc()
        rows = list(queryset.order_by(key, tie)[: size + 1])
        more = len(rows) > size
        rows = rows[:size]
        if backwards:
            rows.reverse()
        self.field = field
        self.has_next = more if not backwards else cursor is not None
        self.has_previous = cursor is not None if not backwards else more
        self.rows = rows
        return rows

    def _position(self, row, reverse: bool) -> str:
        value = getattr(row, self.field)
        if isinstance(value, datetime):
            value = value.isoformat()
        position = {"o": self.ordering, "v": value, "id": row.pk}
        return _encode({**position, **({"r": 1} if reverse else {})})

    def _link(self, cursor: str | None) -> str:
        url = self.request.build_absolute_uri()
        if cursor is None:
            return remove_query_param(url, self.cursor_query_param)
        return replace_query_param(url, self.cursor_query_param, cursor)

    def get_next_link(self) -> str | None:
        if not self.has_next or not self.rows:
            return None
        return self._link(self._position(self.rows[-1], reverse=False))

    def get_previous_link(self) -> str | None:
        if not self.has_previous:
            return None
        if not self.rows:
            return self._link(None)
        return self._link(self._position(self.rows[0], reverse=True))

    def get_paginated_response(self, data):
        return Response(
            {"next": self.get_next_link(), "previous": self.get_previous_link(), "results": data}
        )

    def get_paginated_response_schema(self, schema):
        return CursorPagination.get_paginated_response_schema(self, schema)

    def get_schema_operation_parameters(self, view):
        return [
            {
                "name": self.cursor_query_param,
                "required": False,
                "in": "query",
                "description": "The page after (or before) another: take it from next/previous.",
                "schema": {"type": "string"},
            },
            {
                "name": self.page_size_query_param,
                "required": False,
                "in": "query",
                "description": f"Rows per page (default {self.page_size}, at most "
                f"{self.max_page_size}).",
                "schema": {"type": "integer"},
            },
        ]
