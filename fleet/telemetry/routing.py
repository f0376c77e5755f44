"""Websocket routes of the live console (gathered by fleet/routing.py)."""

from django.urls import path

from fleet.telemetry.consumers import LiveConsumer, WallConsumer

websocket_urlpatterns = [
    path("ws/live/", LiveConsumer.as_asgi()),
    path("ws/wall/", WallConsumer.as_asgi()),
]
