"""Field validators shared by the model, the API serializers and the forms."""

from __future__ import annotations

import json
import re

from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator

from fleet.nodes.choices import NodeRole

NAME_RE = r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$"
validate_node_name = RegexValidator(
    NAME_RE,
    "Use 1-63 lowercase letters, digits and hyphens, starting and ending with a letter or digit.",
    code="invalid_name",
)

LABEL_KEY_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._/-]{0,61}[A-Za-z0-9])?$")
MAX_LABELS = 32
MAX_LABEL_VALUE = 128
MAX_DEVICE_INFO_BYTES = 8192


def normalize_roles(roles) -> list[str]:
    """Sorted, unique roles; raises ValidationError on anything else."""
    if not isinstance(roles, list | tuple) or not roles:
        raise ValidationError("Give at least one role.", code="empty_roles")
    valid = set(NodeRole.values)
    unknown = [r for r in roles if r not in valid]
    if unknown:
        raise ValidationError(
            f"Unknown role(s) {unknown!r}; choose from {sorted(valid)}.", code="invalid_role"
        )
    return sorted(set(roles))


def validate_roles(roles) -> None:
    normalize_roles(roles)


def validate_labels(labels) -> None:
    if not isinstance(labels, dict):
        raise ValidationError("Labels must be an object of string keys to string values.")
    if len(labels) > MAX_LABELS:
        raise ValidationError(f"At most {MAX_LABELS} labels.")
    for key, value in labels.items():
        if not isinstance(key, str) or not LABEL_KEY_RE.match(key):
            raise ValidationError(
                f"Label key {key!r} must be 1-63 letters, digits, '.', '_', '-' or '/', "
                "starting and ending with a letter or digit.",
                code="invalid_label_key",
            )
        if not isinstance(value, str) or len(value) > MAX_LABEL_VALUE:
            raise ValidationError(
                f"Label {key!r} must have a string value of at most {MAX_LABEL_VALUE} characters.",
                code="invalid_label_value",
            )


def validate_device_info(info) -> None:
    if not isinstance(info, dict):
        raise ValidationError("device_info must be an object.")
    if len(json.dumps(info)) > MAX_DEVICE_INFO_BYTES:
        raise ValidationError(f"device_info must be at most {MAX_DEVICE_INFO_BYTES} bytes as JSON.")
