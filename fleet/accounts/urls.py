"""Account pages, included under /account/."""

from django.urls import path

from fleet.accounts import views

app_name = "accounts"

urlpatterns = [
    path("keys/", views.api_keys, name="keys"),
    path("keys/<int:pk>/revoke", views.api_key_revoke_view, name="key-revoke"),
]
