"""The REST API's side of the input rules: its JSON parser, renderer and paginator.

Set as DRF's defaults in settings.REST_FRAMEWORK, so every view gets them; field-level
ranges (serializers' min/max) still apply after these."""

from __future__ import annotations

import json

from django.conf import settings
from rest_framework import status
from rest_framework.exceptions import APIException, ParseError, ValidationError
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.parsers import JSONParser
from rest_framework.renderers import JSONRenderer

from fleet.guard.body_rules import InputError, load_json

MAX_PAGE_SIZE = 200
MAX_OFFSET = 2**31 - 1


class RequestTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request body is too large."
    default_code = "request_too_large"


def field_error(exc: InputError) -> APIException:
    """A top-level problem is a parse error; one inside the body names its field."""
    if not exc.path:
        return ParseError(exc.message)
    return ValidationError({exc.path: [exc.message]})


class SafeJSONParser(JSONParser):
    """JSON bodies up to DATA_UPLOAD_MAX_MEMORY_SIZE bytes (413 above), checked by
    `fleet.guard.body_rules` before any serializer sees them."""

    def parse(self, stream, media_type=None, parser_context=None):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        raw = stream.read(limit + 1) if stream is not None else b""
        if limit is not None and len(raw) > limit:
            raise RequestTooLarge(f"The request body is larger than {limit} bytes.")
        try:
            return load_json(raw)
        except InputError as exc:
            raise field_error(exc) from exc


class SafeJSONRenderer(JSONRenderer):
    """Readable UTF-8 JSON; if some stored text cannot be encoded (a lone surrogate that got
    in before the input rules existed), the same data with \\u escapes instead of a 500."""

    def render(self, data, accepted_media_type=None, renderer_context=None):
        try:
            return super().render(data, accepted_media_type, renderer_context)
        except UnicodeEncodeError:
            return json.dumps(data, cls=self.encoder_class, ensure_ascii=True).encode("ascii")


class CappedLimitOffsetPagination(LimitOffsetPagination):
    """`?limit=` is clamped to MAX_PAGE_SIZE; an `?offset=` past any table is a 400."""

    max_limit = MAX_PAGE_SIZE

    def get_offset(self, request):
        offset = super().get_offset(request)
        if offset > MAX_OFFSET:
            raise ValidationError({self.offset_query_param: [f"At most {MAX_OFFSET}."]})
        return offset
