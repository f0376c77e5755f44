"""`{% draft_versions pipeline %}`: the pipeline page's table of learned draft versions and
their measured acceptance (learning from traffic), from its own small template, so the page
needs one line and its view nothing."""

from __future__ import annotations

from django import template

from inference.learning import selectors

register = template.Library()

SHOWN = 10


@register.inclusion_tag("pipelines/_draft_versions.html")
def draft_versions(pipeline) -> dict:
    return {
        "policy": selectors.policy_of(pipeline),
        "versions": list(selectors.versions_of(pipeline)[:SHOWN]),
    }
