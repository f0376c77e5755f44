"""ApplyCheck.event points at AuditEvent in its new app (`audit`): state only, the column and
its foreign key to `pipelines_auditevent` are unchanged."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0001_initial"),
        ("planner", "0001_apply_check"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.AlterField(
                    model_name="applycheck",
                    name="event",
                    field=models.ForeignKey(
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="audit.auditevent",
                    ),
                ),
            ],
        ),
    ]
