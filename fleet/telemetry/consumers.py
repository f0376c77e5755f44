"""Websockets of the live console.

`ws/live/`  a logged-in user with the view role. After connecting, the page subscribes:
            {"action": "subscribe", "topic": "fleet"}
            {"action": "subscribe", "topic": "pipeline", "id": 3}
            {"action": "subscribe", "topic": "node", "id": 12}
            Each subscription is authorised ONCE, here, with the same policy as the REST API
            (`can(user, "view", obj)`); the group then receives the aggregator's batched
            messages (fleet.telemetry.payloads) and nothing is checked per message.
            The fleet topic is a feed of deltas (fleet.telemetry.deltas): a snapshot first,
            then one delta per tick. The page then says which rows it shows, and asks for a
            new snapshot when it lost its place:
            {"action": "view", "ids": [12, 13, ...]}   (at most MAX_VIEW ids)
            {"action": "snapshot"}
            A page sorted by a live figure says which (`fig_order.SORT_FIGS`; also as
            "sort" in its fleet subscription, so a reconnected socket knows it again):
            {"action": "sort", "key": "tps"}   ("key": null: sorted by a row's own field)
            and gets that figure of every node at once, then every SORT_EVERY_S.
`ws/wall/`  the monitoring wall: a signed wall-link token or a logged-in viewer. The token
            comes as a subprotocol (`tandem.wall-token.<token>`, see accounts.wall_links), never
            in the URL, which access logs keep. Read-only: joins the wall group, ignores
            whatever the client sends. An expired or revoked link closes the socket (4403).
            A refused wall socket is accepted only to be closed at once with its code: a
            browser sees the close code of an accepted socket only (a refused handshake reads
            as 1006, a lost connection), and a wall link refused is final, not "reconnecting".
            Nothing is joined or sent before that close.

Both authenticate BEFORE accepting: an anonymous socket is closed with 4401, an
authenticated one without the role with 4403, and never accepted first. A socket opened
with a login session closes (4401) when that session ends: at once on logout, and within
`live_sessions.RECHECK_S` when it expires or is deleted. It closes too when its user may
no longer watch (`accounts.live_users`): at once (the `user.changed` message) when the user is
deactivated (4401), has the password changed (4401) or loses the role (4403).
"""

from __future__ import annotations

import json
import time

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.utils import timezone

from fleet import redis_clients
from fleet.accounts import live_sessions, live_users
from fleet.accounts.access import can
from fleet.telemetry import feed, payloads
from fleet.telemetry.deltas import with_figures
from fleet.telemetry.fig_order import SORT_FIGS
from fleet.telemetry.snapshot import INTEREST_KEY, LIVE_KEY

CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
INTEREST_TTL_S = 300
MAX_SUBSCRIPTIONS = 50
MAX_VIEW = 500  # rows whose live figures one socket follows (a screenful is ~40)
SNAPSHOT_MIN_INTERVAL_S = 1.0  # a client asking again sooner waits for the next one
# A sorted page re-orders no more often than this: rows do not trade places under the pointer
# every tick, and 10,000 figures (~120 KB) every 5 s is ~24 KB/s.
SORT_EVERY_S = 5.0
SORT_MIN_INTERVAL_S = 1.0  # a new sort asked sooner after the last column waits for a tick


def _redis():
    """The event loop's asyncio Redis client."""
    return redis_clients.async_client()


@database_sync_to_async
def _viewable(topic: str, object_id) -> tuple[int, object | None]:
    """(status, object): 404 when missing, else 200 with the object to authorise."""
    from fleet.nodes.models import Node
    from fleet.pipelines.models import Pipeline

    model = {"pipeline": Pipeline, "node": Node}[topic]
    if isinstance(object_id, bool) or not isinstance(object_id, int):
        return 400, None
    obj = model.objects.filter(pk=object_id).first()
    return (200, obj) if obj is not None else (404, None)


@database_sync_to_async
def _can(user, action: str, obj=None) -> bool:
    return can(user, action, obj)


@database_sync_to_async
def _session_alive(session_key, user_pk) -> bool:
    return live_sessions.session_alive(session_key, user_pk)


@database_sync_to_async
def _user_verdict(user_pk, auth_hash: str):
    return live_users.verdict(user_pk, auth_hash)


class _PushConsumer(AsyncWebsocketConsumer):
    """Forwards aggregator pushes; keeps the aggregator told that its groups have readers;
    ends with the login session it was opened with."""

    fleet_epoch: str | None = None  # the fleet feed's place this socket is at
    fleet_seq: int = 0
    fleet_sort: str | None = None  # the live figure this socket's page sorts by
    fleet_sort_at: float = float("-inf")  # when that figure's column was last sent
    fleet_sort_due: bool = False  # a column asked for, to go with a tick

    groups_joined: dict[str, float]
    session_group: str | None = None
    session_checked: float = 0.0
    closing: bool = False

    async def follow_session(self, user) -> bool:
        """After accept: close when this socket's login session ends, or when its user may
        no longer watch. False when it closed at once (the user changed while connecting)."""
        session = self.scope.get("session")
        self.session_key = getattr(session, "session_key", None) if session else None
        self.session_user_pk = user.pk
        self.session_checked = time.monotonic()
        self.user_hash = user.get_session_auth_hash()
        self.user_group = live_users.user_group(user.pk)
        await self.channel_layer.group_add(self.user_group, self.channel_name)
        if self.session_key:
            self.session_group = live_sessions.session_group(self.session_key)
            await self.channel_layer.group_add(self.session_group, self.channel_name)
        return await self._user_allowed()  # a change before the group was joined

    async def session_ended(self, event) -> None:
        await self._end(CLOSE_UNAUTHENTICATED)

    async def user_changed(self, event) -> None:
        """accounts.live_users: this socket's user was changed: may it still watch?"""
        if not self.closing:
            await self._user_allowed()

    async def _user_allowed(self) -> bool:
        code, fresh = await _user_verdict(self.session_user_pk, self.user_hash)
        if code is not None:
            await self._end(code)
            return False
        if hasattr(self, "user"):
            self.user = fresh  # later subscriptions are authorised with its role of now
        return True

    async def _end(self, code: int) -> None:
        if not self.closing:
            self.closing = True
            await self.close(code=code)

    async def _still_allowed(self) -> bool:
        """Rechecked while streaming (every RECHECK_S): the session is still there."""
        if not getattr(self, "session_user_pk", None):
            return True
        now = time.monotonic()
        if now - self.session_checked < live_sessions.RECHECK_S:
            return True
        self.session_checked = now
        if not await _session_alive(self.session_key, self.session_user_pk):
            await self._end(CLOSE_UNAUTHENTICATED)
            return False
        return await self._user_allowed()

    async def join(self, group: str, snapshot_field: str | None) -> None:
        await self.channel_layer.group_add(group, self.channel_name)
        self.groups_joined[group] = 0.0
        await self._touch(group)
        if snapshot_field:
            raw = await _redis().hget(LIVE_KEY, snapshot_field)
            if raw:
                await self.send(text_data=raw.decode())

    async def _touch(self, group: str) -> None:
        now = time.time()
        if now - self.groups_joined.get(group, 0.0) > 60:
            self.groups_joined[group] = now
            await _redis().zadd(INTEREST_KEY, {group: now + INTEREST_TTL_S})

    async def disconnect(self, code):
        for group in getattr(self, "groups_joined", {}):
            await self.channel_layer.group_discard(group, self.channel_name)
        if self.session_group:
            await self.channel_layer.group_discard(self.session_group, self.channel_name)
        if getattr(self, "user_group", None):
            await self.channel_layer.group_discard(self.user_group, self.channel_name)

    async def telemetry_push(self, event):
        if self.closing or not await self._still_allowed():
            return
        await self.send(text_data=event["text"])
        for group in self.groups_joined:
            if time.time() - self.groups_joined[group] > 60:
                await self._touch(group)

    async def send_json(self, message: payloads.Message) -> None:
        await self.send(text_data=payloads.encode(message))

    async def fleet_tick(self, event):
        """fleet.telemetry.feed's event: the tick's delta, plus the figures that moved of the
        rows this socket shows (read from Redis, compared with what it last sent). When the
        delta does not follow what this socket sent (another publisher, or ticks the channel
        layer dropped), the socket gets a new snapshot instead, without being asked. A page
        sorted by a live figure gets its column after it when one is due."""
        if self.closing or not await self._still_allowed():
            return
        epoch, seq = event.get("epoch"), event.get("seq")
        if epoch != self.fleet_epoch or (isinstance(seq, int) and seq > self.fleet_seq + 1):
            await self._send_fleet_snapshot()
        else:
            if isinstance(seq, int) and seq > self.fleet_seq:
                self.fleet_seq = seq
            figs = await self._moved_figures()
            await self.send(text_data=with_figures(event["text"], figs))
        since = time.monotonic() - self.fleet_sort_at
        if self.fleet_sort and (
            since >= SORT_EVERY_S or (self.fleet_sort_due and since >= SORT_MIN_INTERVAL_S)
        ):
            await self._send_fleet_sort()

    async def _send_fleet_sort(self) -> None:
        if self.fleet_sort is None:
            return
        self.fleet_sort_at = time.monotonic()
        self.fleet_sort_due = False
        await self.send(text_data=await feed.sort_column(_redis(), self.fleet_sort))

    async def _moved_figures(self) -> dict[int, str]:
        view = getattr(self, "fleet_view", None)
        if not view:
            return {}
        stored = await feed.read_figures(_redis(), view)
        sent = self.fleet_sent
        moved = {nid: fig for nid, fig in stored.items() if sent.get(nid) != fig}
        sent.update(moved)
        return moved


class LiveConsumer(_PushConsumer):
    fleet_snapshot_at: float = float("-inf")

    async def connect(self):
        self.groups_joined = {}
        self.fleet_view: list[int] = []
        self.fleet_sent: dict[int, str] = {}
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        if not await _can(user, "view"):
            await self.close(code=CLOSE_FORBIDDEN)
            return
        self.user = user
        await self.accept()
        await self.follow_session(user)

    async def receive(self, text_data=None, bytes_data=None):
        if self.closing or not await self._still_allowed():
            return
        try:
            message = json.loads(text_data or "")
        except ValueError:
            message = None
        action = message.get("action") if isinstance(message, dict) else None
        if action in ("view", "snapshot", "sort"):
            await self._fleet_action(action, message)
            return
        if action != "subscribe":
            await self._error(400, 'send {"action": "subscribe", "topic": ..., "id": ...}')
            return
        topic = message.get("topic")
        if len(self.groups_joined) >= MAX_SUBSCRIPTIONS:
            await self._error(429, "too many subscriptions on one socket")
            return
        if topic == "fleet":
            group, field = payloads.GROUP_FLEET, None
            if group not in self.groups_joined:
                await self.send_json({"type": "subscribed", "group": group})
                await self.join(group, None)
                if message.get("sort") is not None and await self._set_fleet_sort(message):
                    await self._send_fleet_sort()  # before the rows: they arrive in order
                await self._send_fleet_snapshot()
            return
        elif topic in ("pipeline", "node"):
            status, obj = await _viewable(topic, message.get("id"))
            if status != 200:
                await self._error(status, f"no such {topic}")
                return
            if not await _can(self.user, "view", obj):
                await self._error(403, f"you may not view this {topic}")
                return
            if topic == "pipeline":
                group, field = payloads.pipeline_group(obj.pk), f"p:{obj.pk}"
            else:
                group, field = payloads.node_group(obj.pk), f"n:{obj.pk}"
        else:
            await self._error(400, "topic must be fleet, pipeline or node")
            return
        if group not in self.groups_joined:
            await self.send_json({"type": "subscribed", "group": group})
            await self.join(group, field)

    async def _error(self, code: int, detail: str) -> None:
        await self.send_json({"type": "error", "code": code, "detail": detail})

    # --- the fleet feed ---------------------------------------------------------------------
    async def _fleet_action(self, action: str, message: dict) -> None:
        if payloads.GROUP_FLEET not in self.groups_joined:
            await self._error(400, 'subscribe to the fleet first: {"topic": "fleet"}')
            return
        if action == "snapshot":
            if time.monotonic() - self.fleet_snapshot_at < SNAPSHOT_MIN_INTERVAL_S:
                await self._error(429, "a snapshot was sent a moment ago")
                return
            await self._send_fleet_snapshot()
            return
        if action == "sort":
            if not await self._set_fleet_sort(message):
                return
            if time.monotonic() - self.fleet_sort_at >= SORT_MIN_INTERVAL_S:
                await self._send_fleet_sort()
            else:  # clicked again at once: the column goes with a tick, a second on
                self.fleet_sort_due = True
            return
        ids = message.get("ids")
        if not isinstance(ids, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in ids
        ):
            await self._error(400, 'send {"action": "view", "ids": [node ids]}')
            return
        if len(ids) > MAX_VIEW:
            await self._error(413, f"a view follows at most {MAX_VIEW} rows")
            return
        view = list(dict.fromkeys(ids))
        kept = set(view)
        self.fleet_sent = {nid: fig for nid, fig in self.fleet_sent.items() if nid in kept}
        self.fleet_view = view
        figs = await self._moved_figures()  # the new rows' figures now, not at the next tick
        if figs:
            await self.send(text_data=with_figures('{"type":"fleet.figs"}', figs))

    async def _set_fleet_sort(self, message: dict) -> bool:
        key = message.get("key", message.get("sort"))
        if key is not None and (not isinstance(key, str) or key not in SORT_FIGS):
            await self._error(400, f"sort by one of {', '.join(SORT_FIGS)}, or null")
            return False
        self.fleet_sort = key
        return True

    async def _send_fleet_snapshot(self) -> None:
        self.fleet_snapshot_at = time.monotonic()
        self.fleet_sent = {}  # the client starts over: resend the figures of its view
        stored = await feed.read_snapshot(_redis())
        if stored is None:
            stored = await database_sync_to_async(feed.snapshot_from_db)()
        self.fleet_epoch, self.fleet_seq, text = stored
        await self.send(text_data=text)
        figs = await self._moved_figures()
        if figs:
            await self.send(text_data=with_figures('{"type":"fleet.figs"}', figs))


class WallConsumer(_PushConsumer):
    link_expires_at = None

    async def connect(self):
        from fleet.accounts.wall_links import WALL_PROTOCOL, token_from_protocols, wall_link_group

        self.groups_joined = {}
        offered = self.scope.get("subprotocols") or []
        token = token_from_protocols(offered)
        link, user = None, None
        protocol = WALL_PROTOCOL if WALL_PROTOCOL in offered else None
        if token:
            link = await _wall_link(token)
            if link is None:
                await self._refuse(CLOSE_FORBIDDEN, protocol)  # revoked, expired or forged
                return
        else:
            user = self.scope.get("user")
            if user is None or not user.is_authenticated:
                await self._refuse(CLOSE_UNAUTHENTICATED, protocol)
                return
            if not await _can(user, "view"):
                await self._refuse(CLOSE_FORBIDDEN, protocol)
                return
        await self.accept(subprotocol=protocol)
        if link is not None:  # revoking the link closes the screens showing it
            self.link_expires_at = link.expires_at
            self.link_group = wall_link_group(link.pk)
            await self.channel_layer.group_add(self.link_group, self.channel_name)
        elif not await self.follow_session(user):
            return
        await self.join(payloads.GROUP_WALL, "fleet")

    async def _refuse(self, code: int, protocol: str | None) -> None:
        """Decided before accepting; accepted only so that the screen reads `code` (final)."""
        self.closing = True
        await self.accept(subprotocol=protocol)
        await self.close(code=code)

    async def _still_allowed(self) -> bool:
        if self.link_expires_at is not None and self.link_expires_at <= timezone.now():
            await self._end(CLOSE_FORBIDDEN)  # the link expired while the screen was open
            return False
        return await super()._still_allowed()

    async def receive(self, text_data=None, bytes_data=None):
        return  # read-only

    async def wall_revoked(self, event):
        await self._end(CLOSE_FORBIDDEN)

    async def disconnect(self, code):
        await super().disconnect(code)
        if getattr(self, "link_group", None):
            await self.channel_layer.group_discard(self.link_group, self.channel_name)


@database_sync_to_async
def _wall_link(token: str):
    from fleet.accounts.wall_links import wall_link_for_token

    return wall_link_for_token(token)
