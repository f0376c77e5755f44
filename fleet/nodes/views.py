"""Node registry pages: list and register (admin; shows the token once). A node's own page,
registry facts and live figures together, is the console's (`/nodes/<id>/`). Login
required; the policy is the same `can()` the API uses."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from fleet.accounts.principal import require
from fleet.nodes import selectors, services
from fleet.nodes.forms import NodeListFilterForm, NodeRegisterForm

PAGE_SIZE = 50


@login_required
def node_list(request):
    require(request, "view")
    form = NodeListFilterForm(request.GET or None)
    filters = form.cleaned_data if form.is_valid() else {}
    nodes = selectors.node_list(
        states=[filters["state"]] if filters.get("state") else None,
        role=filters.get("role") or None,
    )
    page = Paginator(nodes, PAGE_SIZE).get_page(request.GET.get("page"))
    return render(
        request,
        "nodes/node_list.html",
        {"page": page, "nodes": page.object_list, "filter_form": form},
    )


@never_cache
@login_required
@require_http_methods(["GET", "POST"])
def node_register(request):
    require(request, "administer")
    form = NodeRegisterForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            node, token = services.node_register(**form.cleaned_data)
        except ValidationError as exc:
            form.add_error(None, exc)
        else:
            # Rendered, not redirected: the plain token exists only in this response.
            return render(request, "nodes/node_registered.html", {"node": node, "token": token})
    return render(request, "nodes/node_register.html", {"form": form})
