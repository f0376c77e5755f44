"""Forms of the node pages; validation is the model's (same validators as the API)."""

from __future__ import annotations

from django import forms
from django.core.exceptions import ValidationError

from fleet.nodes.choices import NodeRole, NodeState
from fleet.nodes.models import HardwareProfile
from fleet.nodes.validators import NAME_RE, validate_labels, validate_node_name


class NodeRegisterForm(forms.Form):
    name = forms.CharField(
        max_length=63,
        validators=[validate_node_name],
        help_text="Lowercase letters, digits and hyphens, e.g. verify-h100-01.",
        widget=forms.TextInput(attrs={"pattern": NAME_RE.strip("^$"), "autofocus": True}),
    )
    profile = forms.ModelChoiceField(queryset=HardwareProfile.objects.all(), to_field_name="slug")
    roles = forms.MultipleChoiceField(choices=NodeRole.choices, widget=forms.CheckboxSelectMultiple)
    labels = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": "zone=eu-west\nrack=r12"}),
        help_text="One key=value per line.",
    )
    address = forms.CharField(max_length=255, required=False)
    simulated = forms.BooleanField(
        required=False, help_text="A virtual node driven by the simulator."
    )

    def clean_labels(self) -> dict[str, str]:
        labels = {}
        for number, line in enumerate(self.cleaned_data["labels"].splitlines(), start=1):
            if not line.strip():
                continue
            key, sep, value = line.partition("=")
            if not sep:
                raise ValidationError(f"Line {number}: use key=value.")
            labels[key.strip()] = value.strip()
        validate_labels(labels)
        return labels


class NodeListFilterForm(forms.Form):
    state = forms.ChoiceField(choices=[("", "Any state"), *NodeState.choices], required=False)
    role = forms.ChoiceField(choices=[("", "Any role"), *NodeRole.choices], required=False)


class NodeActionForm(forms.Form):
    """What a node action's form sends besides the action: why, whether to override the
    last-healthy-node rule (drain), and the node's version the page showed (a stale one is
    refused, as a stale ETag is in the API)."""

    reason = forms.CharField(max_length=2000, required=False)
    force = forms.BooleanField(required=False)
    node_version = forms.IntegerField(min_value=1, required=False)
