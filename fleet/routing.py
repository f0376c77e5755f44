"""Websocket routes of every app, gathered in one list for the ASGI router."""

from fleet.telemetry.routing import websocket_urlpatterns as telemetry_ws

websocket_urlpatterns: list = [
    *telemetry_ws,
]
