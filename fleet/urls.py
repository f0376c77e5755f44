from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from fleet.health import health, healthz, ping, version_view
from inference.serving import openai_tokenize

api_v1 = [
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    # split view + sidecar: no inline script, no CDN (Content-Security-Policy)
    path("docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="swagger-ui"),
    path("", include("fleet.nodes.urls_api")),
    path("", include("inference.serving.urls_api")),
    path("", include("fleet.accounts.urls_api")),
    path("", include("fleet.pipelines.urls_api")),
    path("", include("inference.learning.urls_api")),
    path("", include("fleet.planner.urls_api")),
    path("", include("fleet.console.urls_api")),
]

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("health", health, name="health"),  # the probes vLLM-compatible clients send
    path("ping", ping, name="ping"),
    path("version", version_view, name="version"),
    # vLLM's tokenizer endpoints (its paths: no /v1 prefix), with /v1's keys and errors
    path("tokenize", openai_tokenize.tokenize, name="tokenize"),
    path("detokenize", openai_tokenize.detokenize, name="detokenize"),
    path("tokenizer_info", openai_tokenize.tokenizer_info, name="tokenizer-info"),
    path("admin/", admin.site.urls),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/v1/", include(api_v1)),
    path("v1/", include("inference.serving.openai_urls")),
    path("account/", include("fleet.accounts.urls")),
    path("nodes/", include("fleet.console.urls_nodes")),
    path("pipelines/", include("fleet.console.urls_pipelines")),
    path("planner/", include("fleet.planner.urls")),
    path("", include("fleet.console.urls")),
]

# JSON errors on /api/ and /v1/ paths (413 for bodies over the upload limit), pages elsewhere.
handler400 = "fleet.guard.pages.bad_request"
handler403 = "fleet.guard.pages.permission_denied"
handler404 = "fleet.guard.pages.page_not_found"
handler500 = "fleet.guard.pages.server_error"
