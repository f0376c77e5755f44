"""Wall links move to the accounts app (they are credentials): the table is renamed to the
accounts app's name and the model leaves this app's state; `accounts.0002_walllink` takes it
up without touching the database. Existing links (and their tokens) keep working."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("console", "0002_wall_link_expiry"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.AlterModelTable(name="walllink", table="accounts_walllink"),
            ],
            state_operations=[
                migrations.DeleteModel(name="WallLink"),
            ],
        ),
    ]
