"""REST routes of the planner (mounted at /api/v1/)."""

from django.urls import path

from fleet.planner import api

app_name = "planner-api"

urlpatterns = [
    path("planner/what-if", api.WhatIf.as_view(), name="what-if"),
    path(
        "planner/pipelines/<int:pk>/recommendation",
        api.Recommendation.as_view(),
        name="recommendation",
    ),
    path("planner/pipelines/<int:pk>/preview", api.Preview.as_view(), name="preview"),
    path("planner/pipelines/<int:pk>/apply", api.Apply.as_view(), name="apply"),
]
