"""Under the real server (daphne, whose access log records every path and query string), a
screen opened with a wall link leaves no trace of its token in the log."""

import asyncio

import httpx
import pytest
import websockets

from fleet.accounts.wall_links import WALL_PROTOCOL, WALL_TOKEN_PROTOCOL, wall_link_create
from tests.serving.conftest import daphne_url  # noqa: F401  (fixture)

pytestmark = pytest.mark.slow


def test_a_wall_token_never_reaches_the_access_log(daphne_url, admin):  # noqa: F811
    _, token = wall_link_create(name="NOC", actor=admin)
    screen = httpx.get(f"{daphne_url}/wall/screen/", timeout=10)
    assert screen.status_code == 200
    data = httpx.get(f"{daphne_url}/wall/data", headers={"X-Wall-Token": token}, timeout=10)
    assert data.status_code == 200

    async def socket() -> str:
        uri = daphne_url.replace("http://", "ws://") + "/ws/wall/"
        protocols = [WALL_PROTOCOL, WALL_TOKEN_PROTOCOL + token.replace(":", ".")]
        async with websockets.connect(
            uri, subprotocols=protocols, origin=daphne_url, open_timeout=10
        ) as ws:
            return ws.subprotocol

    assert asyncio.run(socket()) == WALL_PROTOCOL
    log = daphne_url.log()
    assert "/wall/data" in log and "/wall/screen/" in log, log  # the log is on
    signature = token.rsplit(":", 1)[1]
    assert signature not in log and token.split(":")[0] not in log
