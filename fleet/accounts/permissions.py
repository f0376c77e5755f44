"""DRF side of the one policy in `access.py`."""

from rest_framework import permissions

from fleet.accounts.access import can

SAFE = {"GET", "HEAD", "OPTIONS"}


class RolePermission(permissions.BasePermission):
    """Safe methods need "view"; others need the view's `write_action` ("operate" unless
    the view says otherwise). A view may map methods explicitly with `method_actions`."""

    def has_permission(self, request, view) -> bool:
        action = required_action(request, view)
        return can(request.user, action)


def required_action(request, view) -> str:
    explicit = getattr(view, "method_actions", None) or {}
    if request.method in explicit:
        return explicit[request.method]
    if request.method in SAFE:
        return "view"
    return getattr(view, "write_action", "operate")
