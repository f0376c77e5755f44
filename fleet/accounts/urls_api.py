"""REST routes of accounts, mounted under /api/v1/."""

from django.urls import path

from fleet.accounts import api

urlpatterns = [
    path("api-keys", api.ApiKeyListCreate.as_view(), name="api-key-list"),
    path("api-keys/<int:pk>", api.ApiKeyDetail.as_view(), name="api-key-detail"),
]
