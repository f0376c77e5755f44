"""AuditEvent moves here from the pipelines app: state only, its table
(`pipelines_auditevent`) and rows stay where they are."""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("nodes", "0005_profile_figures_positive"),
        ("pipelines", "0003_config_push_outbox"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.CreateModel(
                    name="AuditEvent",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("actor_label", models.CharField(max_length=150)),
                        ("action", models.CharField(max_length=50)),
                        ("before", models.JSONField(blank=True, default=dict)),
                        ("after", models.JSONField(blank=True, default=dict)),
                        ("reason", models.TextField(blank=True)),
                        (
                            "created_at",
                            models.DateTimeField(
                                db_index=True, default=django.utils.timezone.now
                            ),
                        ),
                        (
                            "actor",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                        (
                            "node",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="audit_events",
                                to="nodes.node",
                            ),
                        ),
                        (
                            "pipeline",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="audit_events",
                                to="pipelines.pipeline",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "pipelines_auditevent",
                        "ordering": ["-created_at", "-id"],
                    },
                ),
            ],
        ),
    ]
