"""drf-spectacular post-processing: every operation documents the errors it really returns.

The statuses come from the layers every REST view shares, so they are added by rule rather
than view by view: 401/403 (authentication and the role policy), 400 (a body or a query,
header or filter parameter to validate), 404 (an object named in the path), 413 (a body over
the upload limit), 429 (throttled authentication, when a throttle is installed). A view's own
declarations win over these."""

from __future__ import annotations

from django.conf import settings

ERROR = {
    "type": "object",
    "properties": {"detail": {"type": "string"}},
    "required": ["detail"],
}
# {"field": ["message", ...], "non_field_errors": [...]} or {"detail": "..."}; nested
# serializers nest the same shape.
VALIDATION_ERROR = {"type": "object", "additionalProperties": True}

DESCRIPTIONS = {
    400: "Invalid input: field errors, or a body that is not acceptable JSON.",
    401: "No credentials, or invalid ones.",
    403: "The caller's role does not allow this.",
    404: "No such object.",
    413: "The request body is over the upload limit.",
    429: "Too many failed attempts; retry later.",
}


def _throttled() -> bool:
    rest = getattr(settings, "REST_FRAMEWORK", {})
    return "axes" in settings.INSTALLED_APPS or bool(rest.get("DEFAULT_THROTTLE_CLASSES"))


def _response(status: int) -> dict:
    name = "ValidationError" if status == 400 else "Error"
    return {
        "description": DESCRIPTIONS[status],
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}},
    }


def error_statuses(operation: dict) -> list[int]:
    parameters = operation.get("parameters", [])
    statuses = [401, 403]
    if "requestBody" in operation or any(p.get("in") != "path" for p in parameters):
        statuses.append(400)
    if any(p.get("in") == "path" for p in parameters):
        statuses.append(404)
    if "requestBody" in operation:
        statuses.append(413)
    if _throttled():
        statuses.append(429)
    return statuses


def document_errors(result, generator, request, public):
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas.setdefault("Error", ERROR)
    schemas.setdefault("ValidationError", VALIDATION_ERROR)
    for operations in result.get("paths", {}).values():
        for operation in operations.values():
            responses = operation.setdefault("responses", {})
            for status in error_statuses(operation):
                responses.setdefault(str(status), _response(status))
    return result
