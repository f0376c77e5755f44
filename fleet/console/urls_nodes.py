"""Node pages, included under /nodes/ (URL names `nodes:*`, as before they moved here)."""

from django.urls import path

from fleet.console import node_views as views

app_name = "nodes"

urlpatterns = [
    path("", views.node_list, name="list"),
    path("register", views.node_register, name="register"),
    path("<int:pk>/act/<str:action>", views.node_act, name="act"),
]
