"""Planner pages (mounted at /planner/)."""

from django.urls import path

from fleet.planner import views

app_name = "planner"

urlpatterns = [
    path("", views.index, name="index"),
    path("what-if", views.what_if, name="what-if"),
    path("pipelines/<int:pk>/", views.recommendations, name="recommendations"),
    path("pipelines/<int:pk>/apply", views.apply, name="apply"),
]
