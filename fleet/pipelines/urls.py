"""Pages of the pipelines app (mounted at /pipelines/)."""

from django.urls import path

from fleet.pipelines import views

app_name = "pipelines"

urlpatterns = [
    path("", views.pipeline_list, name="list"),
    path("new", views.pipeline_new, name="new"),
    path("<int:pk>/edit", views.pipeline_edit, name="edit"),
    path("<int:pk>/act/<str:action>", views.pipeline_act, name="act"),
]
