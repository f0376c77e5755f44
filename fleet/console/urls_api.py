"""REST routes of the console, mounted under /api/v1/."""

from django.urls import path

from fleet.console import api

app_name = "console-api"

urlpatterns = [
    path("wall-links", api.WallLinkList.as_view(), name="wall-link-list"),
    path("processes", api.Processes.as_view(), name="processes"),
    path("series/<str:scope>/<int:pk>", api.Series.as_view(), name="series"),
    path("wall-links/<int:pk>/revoke", api.WallLinkRevoke.as_view(), name="wall-link-revoke"),
]
