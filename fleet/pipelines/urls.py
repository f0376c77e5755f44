"""Pages of the pipelines app (mounted at /pipelines/)."""

from django.urls import path
from django.views.generic import RedirectView

from fleet.pipelines import views

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
