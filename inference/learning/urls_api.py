"""REST routes of learning from traffic, mounted under /api/v1/."""

from django.urls import path

from inference.learning import api

urlpatterns = [
    path("pipelines/<int:pk>/learning", api.Learning.as_view(), name="api-learning"),
    path(
        "pipelines/<int:pk>/draft-versions",
        api.DraftVersions.as_view(),
        name="api-draft-versions",
    ),
    path(
        "pipelines/<int:pk>/captured-pairs",
        api.CapturedPairs.as_view(),
        name="api-captured-pairs",
    ),
]
