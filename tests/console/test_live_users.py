"""A live socket ends within 2 s when its user is demoted, deactivated or has the password
changed (fleet.accounts.live_users); a change to another user, or one that leaves the right
to watch, does not end it."""

import time

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import Group

from fleet.accounts.services import user_set_role
from fleet.telemetry import payloads
from tests.console.test_live_sessions import _closed_with, _drain, _logged_in, _open, _streaming

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]

PATHS = [("/ws/live/", payloads.GROUP_FLEET), ("/ws/wall/", payloads.GROUP_WALL)]


def _demote(user):
    user.groups.clear()


def _demote_from_the_groups_side(user):  # as /admin/'s group page does it
    Group.objects.get(name="viewer").user_set.remove(user)


def _deactivate(user):
    user.is_active = False
    user.save()


def _new_password(user):
    user.set_password("another-horse-battery-staple-43")
    user.save()


@pytest.mark.parametrize("path,group", PATHS)
@pytest.mark.parametrize(
    "change,code",
    [
        (_demote, 4403),
        (_demote_from_the_groups_side, 4403),
        (_deactivate, 4401),
        (_new_password, 4401),
    ],
)
async def test_a_live_socket_closes_within_2_s_when_its_user_may_no_longer_watch(
    viewer, path, group, change, code
):
    comm = await _open(path, await _logged_in(viewer))
    await _streaming(comm, group)
    await _drain(comm)
    changed_at = time.monotonic()
    await sync_to_async(change)(viewer)
    assert await _closed_with(comm) == code
    assert time.monotonic() - changed_at < 2.0


@pytest.mark.parametrize("path,group", PATHS)
async def test_changes_that_leave_the_right_to_watch_do_not_close_it(viewer, operator, path, group):
    mine = await _open(path, await _logged_in(viewer))
    bobs = await _open(path, await _logged_in(operator))
    await _streaming(mine, group)
    await _streaming(bobs, group)
    await _drain(mine)
    await _drain(bobs)

    @sync_to_async
    def changes():
        for change in (_new_password, _deactivate):  # another user's
            change(operator)
        viewer.first_name = "Alice"  # the same user, nothing that matters to the socket
        viewer.save()
        user_set_role(user=viewer, role="operator")  # promoted: still watches

    await sync_to_async(viewer.refresh_from_db)()
    await changes()
    assert await _closed_with(bobs) == 4401  # the changes were sent and acted on
    assert await mine.receive_nothing(timeout=0.5)
    await _streaming(mine, group)
    await mine.disconnect()


async def test_a_change_whose_message_was_lost_is_caught_at_the_next_recheck(viewer, monkeypatch):
    """An UPDATE sends no signal (as a message lost while Redis was away): the periodic
    recheck reads the user again."""
    from django.contrib.auth import get_user_model

    from fleet.accounts import live_sessions
    from tests.console.test_live_sessions import _push_to

    monkeypatch.setattr(live_sessions, "RECHECK_S", 0.0)
    comm = await _open("/ws/live/", await _logged_in(viewer))
    await _streaming(comm, payloads.GROUP_FLEET)
    await _drain(comm)
    users = get_user_model().objects.filter(pk=viewer.pk)
    await sync_to_async(users.update)(is_active=False)
    await _push_to(payloads.GROUP_FLEET)
    assert await _closed_with(comm) == 4401
