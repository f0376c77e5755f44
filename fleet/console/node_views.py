"""Node registry pages (the console's, mounted at /nodes/; the nodes app imports neither
pipelines nor the data plane): list, register (admin; shows the token once) and the node
actions (drain and return: operators; retire and rotate the token: admins, after a
confirmation).
A node's own page, registry facts and live figures together, is the console's
(`/nodes/<id>/`); it includes `nodes/_actions.html` for the same controls. Login required;
the policy is the same `can()` the API uses, and each action calls the service its REST
endpoint calls (drain and return are audited by `fleet/pipelines/node_actions.py`)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from fleet.accounts.errors import Conflict, errors_text
from fleet.accounts.principal import require
from fleet.console.node_forms import NodeActionForm, NodeListFilterForm, NodeRegisterForm
from fleet.nodes import selectors, services
from fleet.nodes.models import Node, NodeConflict
from fleet.pipelines import node_actions

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


# action: (role needed, confirmation asked first (title, detail, button) or None)
NODE_ACTIONS = {
    "drain": ("operate", None),
    "return": ("operate", None),
    "retire": (
        "administer",
        (
            "Retire {node}?",
            "A retired node takes no work, its tokens are revoked and it cannot come back: "
            "register a new node instead. It stays listed, for the record.",
            "Retire",
        ),
    ),
    "rotate-token": (
        "administer",
        (
            "Rotate the token of {node}?",
            "Its current tokens are revoked at once: its agent is refused until it is started "
            "with the new token, shown on the next page once.",
            "Rotate token",
        ),
    ),
}


def _back(request, node: Node):
    target = request.POST.get("next", "")
    if target and url_has_allowed_host_and_scheme(target, {request.get_host()}):
        return redirect(target)
    return redirect("console:node", pk=node.pk)


def _confirm(request, node: Node, question: tuple[str, str, str]):
    title, detail, button = question
    carried = [
        (k, v) for k, v in request.POST.items() if k in ("next", "reason", "node_version", "force")
    ]
    return render(
        request,
        "confirm.html",
        {
            "title": title.format(node=node.name),
            "detail": detail,
            "button": button,
            "action_url": request.path,
            "carried": carried,
            "cancel_url": f"/nodes/{node.pk}/",
        },
    )


@never_cache
@login_required
@require_POST
def node_act(request, pk: int, action: str):
    if action not in NODE_ACTIONS:
        raise Http404("unknown action")
    needed, question = NODE_ACTIONS[action]
    require(request, needed)
    node = get_object_or_404(Node, pk=pk)
    if question and request.POST.get("confirmed") != "yes":
        return _confirm(request, node, question)
    form = NodeActionForm(request.POST)
    if not form.is_valid():
        messages.error(request, f"Refused: {errors_text(ValidationError(form.errors))}")
        return _back(request, node)
    args = form.cleaned_data
    try:
        if action == "drain":
            node_actions.node_drain(node_id=node.pk, actor=request.user, **args)
            done = f"{node.name} is draining: it finishes its sequences and takes no new ones."
        elif action == "return":
            args.pop("force")
            node_actions.node_return(node_id=node.pk, actor=request.user, **args)
            done = f"{node.name} is back in service."
        elif action == "retire":
            services.node_retire(
                node=node,
                actor=request.user,
                expected_version=args["node_version"],
                force=args["force"],
            )
            done = f"{node.name} is retired; its tokens are revoked."
        else:
            _token, plain = services.node_token_rotate(node=node, actor=request.user)
            # Rendered, not redirected: the plain token exists only in this response.
            return render(
                request,
                "nodes/node_registered.html",
                {"node": node, "token": plain, "rotated": True},
            )
    except (ValidationError, Conflict, NodeConflict) as exc:
        messages.error(request, f"Refused: {errors_text(exc)}")
    else:
        messages.success(request, done)
    return _back(request, node)
