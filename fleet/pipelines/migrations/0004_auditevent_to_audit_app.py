"""AuditEvent leaves the pipelines app for `audit` (fleet/audit/migrations/0001_initial.py):
state only, the table stays."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0001_initial"),
        ("planner", "0002_apply_check_event_audit"),
        ("pipelines", "0003_config_push_outbox"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[migrations.DeleteModel(name="AuditEvent")],
        ),
    ]
