"""`{% load node_facts %}`: a node's device info as labelled figures with units."""

from django import template

from fleet.nodes.device_facts import device_facts as _device_facts

register = template.Library()


@register.filter
def device_facts(info):
    return _device_facts(info)
