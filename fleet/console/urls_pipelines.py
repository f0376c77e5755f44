"""Pipeline pages, included under /pipelines/ (URL names `pipelines:*`, as before they moved
here from the pipelines app, which does not import the data plane for a page)."""

from django.urls import path
from django.views.generic import RedirectView

from fleet.console import pipeline_views as views

app_name = "pipelines"

urlpatterns = [
    path("", views.pipeline_list, name="list"),
    path("new", views.pipeline_new, name="new"),
    # the operators' page of a pipeline is now its one page: old links keep working
    path(
        "<int:pk>/edit",
        RedirectView.as_view(pattern_name="console:pipeline", permanent=True),
        name="edit",
    ),
    path("<int:pk>/act/<str:action>", views.pipeline_act, name="act"),
]
