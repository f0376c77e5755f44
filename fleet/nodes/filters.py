"""Filtersets for the node registry API (`?state=&role=&kind=&label=k:v&simulated=`)."""

from __future__ import annotations

import django_filters
from django.core.exceptions import ValidationError

from fleet.nodes.choices import NodeRole, NodeState, ProfileKind
from fleet.nodes.models import HardwareProfile, Node


def parse_label_selector(raw: str) -> tuple[str, str]:
    key, sep, value = raw.partition(":")
    if not sep or not key:
        raise ValidationError({"label": [f"Use key:value, got {raw!r}."]})
    return key, value


class NodeFilter(django_filters.FilterSet):
    # distinct=False: no join here repeats a node, and SELECT DISTINCT over every column
    # (JSON ones too) made PostgreSQL sort the whole filtered fleet for each page
    state = django_filters.MultipleChoiceFilter(choices=NodeState.choices, distinct=False)
    role = django_filters.ChoiceFilter(choices=NodeRole.choices, method="filter_role")
    kind = django_filters.ChoiceFilter(field_name="profile__kind", choices=ProfileKind.choices)
    label = django_filters.CharFilter(
        method="filter_label",
        help_text="key:value; repeat the parameter to require several labels",
    )
    simulated = django_filters.BooleanFilter()
    profile = django_filters.CharFilter(field_name="profile__slug")

    class Meta:
        model = Node
        fields = ["state", "role", "kind", "label", "simulated", "profile"]

    def filter_role(self, queryset, name, value):
        return queryset.with_role(value)

    def filter_label(self, queryset, name, value):
        raw_values = self.data.getlist("label") if hasattr(self.data, "getlist") else [value]
        for raw in raw_values:
            key, wanted = parse_label_selector(raw)
            queryset = queryset.with_label(key, wanted)
        return queryset


class ProfileFilter(django_filters.FilterSet):
    kind = django_filters.ChoiceFilter(choices=ProfileKind.choices)
    vendor = django_filters.CharFilter(lookup_expr="iexact")

    class Meta:
        model = HardwareProfile
        fields = ["kind", "vendor"]
