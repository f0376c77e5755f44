from django.urls import path

from fleet.console import views

app_name = "console"

urlpatterns = [
    path("", views.home, name="home"),
]
