"""The API keys page (`/account/keys/`): create a key (its secret shown once), list keys and
revoke them. The rules are the REST API's (`fleet/accounts/api.py`): everyone with a role
manages their own keys, admins everyone's, and only admins create keys for other users; the
same serializer checks the same input, the same services act."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from fleet.accounts.access import can, role_of
from fleet.accounts.api import ApiKeyCreateSerializer, keys_for
from fleet.accounts.principal import require
from fleet.accounts.services import api_key_create, api_key_revoke

PAGE_LIMIT = 200


def _page(request, *, created=None, plain: str = "", errors=None, status: int = 200):
    keys = list(keys_for(request.user).select_related("user")[:PAGE_LIMIT])
    for key in keys:
        key.owner_role = role_of(key.user).name.lower()
    context = {
        "keys": keys,
        "created": created,
        "plain": plain,
        "errors": errors or {},
        "form_values": request.POST if errors else {},
        "may_pick_owner": can(request.user, "administer"),
    }
    return render(request, "accounts/api_keys.html", context, status=status)


@never_cache
@login_required
@require_http_methods(["GET", "POST"])
def api_keys(request):
    require(request, "view")
    if request.method == "GET":
        return _page(request)
    data = {k: v.strip() for k, v in request.POST.items() if k in ("name", "user") and v.strip()}
    incoming = ApiKeyCreateSerializer(data=data, context={"request": request})
    if not incoming.is_valid():
        return _page(request, errors=incoming.errors, status=400)
    owner = incoming.validated_data.get("user") or request.user
    key, plain = api_key_create(user=owner, name=incoming.validated_data["name"])
    # Rendered, not redirected: the plain key exists only in this response.
    return _page(request, created=key, plain=plain)


@login_required
@require_POST
def api_key_revoke_view(request, pk: int):
    require(request, "view")
    key = get_object_or_404(keys_for(request.user), pk=pk)  # others' keys: 404 unless admin
    if request.POST.get("confirmed") != "yes":
        return render(
            request,
            "confirm.html",
            {
                "title": f"Revoke the API key “{key.name}” ({key.prefix}…) of {key.user}?",
                "detail": "Clients using it are refused from the next request on. "
                "This cannot be undone: create a new key instead.",
                "button": "Revoke",
                "action_url": request.path,
                "carried": [],
                "cancel_url": "/account/keys/",
            },
        )
    already = key.revoked_at is not None
    api_key_revoke(key=key)
    if already:
        messages.info(request, f"The key “{key.name}” was already revoked.")
    else:
        messages.success(request, f"The key “{key.name}” ({key.prefix}…) is revoked.")
    return redirect("accounts:keys")
