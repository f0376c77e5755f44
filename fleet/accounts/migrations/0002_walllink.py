"""Wall links, moved from the console app: state only, the table (renamed by
`console.0003_walllink_to_accounts`) and its rows are already there."""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0001_initial"),
        ("console", "0003_walllink_to_accounts"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.CreateModel(
                    name="WallLink",
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
                        (
                            "name",
                            models.CharField(
                                help_text="Where the screen is, e.g. 'NOC left'", max_length=100
                            ),
                        ),
                        ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                        ("revoked_at", models.DateTimeField(blank=True, null=True)),
                        ("last_used_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "expires_at",
                            models.DateTimeField(
                                blank=True, help_text="Empty: never expires", null=True
                            ),
                        ),
                        (
                            "created_by",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                    ],
                    options={
                        "ordering": ["-created_at", "-id"],
                    },
                ),
            ],
        ),
    ]
