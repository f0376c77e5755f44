"""A live socket ends with its login session: at once on logout, and at the next recheck
when the session expired or was deleted without one."""

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.contrib.sessions.models import Session
from django.test import Client
from django.utils import timezone

from fleet.accounts import live_sessions
from fleet.asgi import application
from fleet.telemetry import payloads
from tests.factories import PASSWORD

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]

PUSH = {"type": "telemetry.push", "text": '{"type": "fleet.update", "ts": 1}'}


@sync_to_async
def _logged_in(user) -> Client:
    client = Client()
    assert client.login(username=user.username, password=PASSWORD)
    return client


async def _open(path: str, client: Client) -> WebsocketCommunicator:
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    headers = [(b"origin", b"http://testserver"), (b"host", b"testserver"), (b"cookie", cookie)]
    comm = WebsocketCommunicator(application, path, headers=headers)
    connected, _ = await comm.connect()
    assert connected
    if path == "/ws/live/":
        await comm.send_json_to({"action": "subscribe", "topic": "fleet"})
        assert (await comm.receive_json_from())["type"] == "subscribed"
        assert (await comm.receive_json_from())["type"] == "fleet.snapshot"
    return comm


async def _closed_with(comm: WebsocketCommunicator) -> int:
    """The close code the server sent; then the disconnect a real server sends after it (the
    consumer ends as under uvicorn, not by the loop's cancel-everything at teardown)."""
    while True:
        out = await comm.receive_output(timeout=5)
        if out["type"] == "websocket.close":
            await comm.disconnect(code=out["code"])
            return out["code"]
        assert out["type"] != "websocket.send" or "fleet.update" not in out.get("text", ""), (
            "a push reached a socket whose session had ended"
        )


async def _push_to(group: str) -> None:
    await get_channel_layer().group_send(group, PUSH)


async def _streaming(comm: WebsocketCommunicator, group: str) -> None:
    """Pushes until one arrives (the wall joins its group just after accepting)."""
    for _ in range(20):
        await _push_to(group)
        if not await comm.receive_nothing(timeout=0.25):
            assert "fleet.update" in await comm.receive_from()
            return
    raise AssertionError("no push reached the socket")


async def _drain(comm: WebsocketCommunicator) -> None:
    while not await comm.receive_nothing(timeout=0.3):
        await comm.receive_from()


@pytest.mark.parametrize(
    "path,group", [("/ws/live/", payloads.GROUP_FLEET), ("/ws/wall/", payloads.GROUP_WALL)]
)
async def test_logging_out_closes_the_sessions_live_sockets(viewer, path, group):
    alice = await _logged_in(viewer)
    comm = await _open(path, alice)
    other = await _open(path, await _logged_in(viewer))  # another session of the same user
    await _streaming(comm, group)
    await _streaming(other, group)
    await _drain(comm)

    await sync_to_async(alice.post)("/logout/")
    assert await _closed_with(comm) == 4401
    await _streaming(other, group)  # the other session still streams
    await other.disconnect()


async def test_an_expired_session_stops_the_stream_at_the_next_recheck(viewer, monkeypatch):
    monkeypatch.setattr(live_sessions, "RECHECK_S", 0.0)
    alice = await _logged_in(viewer)
    comm = await _open("/ws/live/", alice)
    await _streaming(comm, payloads.GROUP_FLEET)
    await _drain(comm)
    key = alice.cookies["sessionid"].value
    await sync_to_async(Session.objects.filter(session_key=key).update)(expire_date=timezone.now())
    await _push_to(payloads.GROUP_FLEET)
    assert await _closed_with(comm) == 4401


async def test_a_wall_screen_closes_when_its_link_expires(admin):
    import asyncio
    from datetime import timedelta

    from fleet.accounts.wall_links import WALL_PROTOCOL, WALL_TOKEN_PROTOCOL, wall_link_create

    expires_at = timezone.now() + timedelta(seconds=1.5)
    _, token = await sync_to_async(wall_link_create)(
        name="lobby", actor=admin, expires_at=expires_at
    )
    headers = [(b"origin", b"http://testserver"), (b"host", b"testserver")]
    protocols = [WALL_PROTOCOL, WALL_TOKEN_PROTOCOL + token.replace(":", ".")]
    comm = WebsocketCommunicator(application, "/ws/wall/", headers=headers, subprotocols=protocols)
    assert (await comm.connect())[0]
    await _streaming(comm, payloads.GROUP_WALL)
    await _drain(comm)
    await asyncio.sleep(max(0.0, (expires_at - timezone.now()).total_seconds()) + 0.1)
    await _push_to(payloads.GROUP_WALL)
    assert await _closed_with(comm) == 4403
