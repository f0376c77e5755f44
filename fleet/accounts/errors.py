"""One shape for API errors; conflicts and illegal transitions become 409, never 500."""

import logging

from django.core.exceptions import ValidationError as DjangoValidationError
from redis.exceptions import RedisError
from rest_framework import status
from rest_framework.exceptions import APIException, ValidationError
from rest_framework.views import exception_handler as drf_exception_handler


class Conflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "The resource changed or is in a state that does not allow this."
    default_code = "conflict"


class Unavailable(APIException):
    """A dependency (Redis) is unreachable for a moment: retry, nothing was half done."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "The message queue is unreachable for a moment; please retry."
    default_code = "unavailable"


def exception_handler(exc, context):
    if isinstance(exc, DjangoValidationError):
        exc = ValidationError(exc.message_dict if hasattr(exc, "error_dict") else exc.messages)
    elif isinstance(exc, RedisError):
        logging.getLogger(__name__).warning("API: Redis unreachable: %r", exc)
        exc = Unavailable()
    response = drf_exception_handler(exc, context)
    if response is not None and isinstance(exc, Unavailable):
        response["Retry-After"] = "2"
    return response


def errors_text(exc: Exception) -> str:
    """A refusal as one line for a page's message: "field: reason; field: reason"."""
    if isinstance(exc, DjangoValidationError):
        if hasattr(exc, "error_dict"):
            return "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())
        return " ".join(exc.messages)
    return _flat(getattr(exc, "detail", exc))


def _flat(detail) -> str:
    if isinstance(detail, dict):
        return "; ".join(f"{k}: {_flat(v)}" for k, v in detail.items())
    if isinstance(detail, list):
        return " ".join(_flat(item) for item in detail)
    return str(detail)
