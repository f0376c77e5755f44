"""OpenAI-compatible routes, mounted at /v1/."""

from django.urls import path, re_path

from inference.serving import openai_api

urlpatterns = [
    path("models", openai_api.models_list, name="openai-models"),
    path("models/<str:model>", openai_api.model_detail, name="openai-model"),
    path("completions", openai_api.completions, name="openai-completions"),
    path("chat/completions", openai_api.chat_completions, name="openai-chat-completions"),
    re_path(r"^(?P<path>.*)$", openai_api.not_found),
]
