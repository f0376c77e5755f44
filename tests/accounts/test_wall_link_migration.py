"""Wall links moved from the console app to accounts without losing a row: a link created
before the move is the same link (id, name, expiry, creator) after it, and its token works."""

from datetime import timedelta

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

BEFORE = [("console", "0002_wall_link_expiry"), ("accounts", "0001_initial")]
AFTER = [("console", "0003_walllink_to_accounts"), ("accounts", "0002_walllink")]


@pytest.mark.django_db(transaction=True)
def test_existing_wall_links_survive_the_move(admin):
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps.get_model("console", "WallLink")
    expires = timezone.now() + timedelta(days=1)
    link = old.objects.create(name="NOC left", created_by_id=admin.pk, expires_at=expires)

    executor = MigrationExecutor(connection)  # reload the graph, as `migrate` would
    executor.migrate(AFTER)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())

    from fleet.accounts.models import WallLink
    from fleet.accounts.wall_links import wall_link_for_token, wall_token

    moved = WallLink.objects.get(pk=link.pk)
    assert (moved.name, moved.created_by_id, moved.expires_at) == ("NOC left", admin.pk, expires)
    assert wall_link_for_token(wall_token(moved)) == moved
