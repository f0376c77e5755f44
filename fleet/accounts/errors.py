"""One shape for API errors; conflicts and illegal transitions become 409, never 500."""

from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import status
from rest_framework.exceptions import APIException, ValidationError
from rest_framework.views import exception_handler as drf_exception_handler


class Conflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "The resource changed or is in a state that does not allow this."
    default_code = "conflict"


def exception_handler(exc, context):
    if isinstance(exc, DjangoValidationError):
        exc = ValidationError(exc.message_dict if hasattr(exc, "error_dict") else exc.messages)
    return drf_exception_handler(exc, context)


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
