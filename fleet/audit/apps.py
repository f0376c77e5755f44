from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "fleet.audit"
    label = "audit"
