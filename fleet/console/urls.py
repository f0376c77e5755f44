from django.urls import path
from django.views.generic import RedirectView

from fleet.console import alert_views, generation_views, live_views, views
from fleet.telemetry.metrics import metrics_view

app_name = "console"

urlpatterns = [
    path("", views.home, name="home"),
    # live console (telemetry): fleet, pipeline, node, wall, wall links, Prometheus
    path("fleet/", live_views.fleet_page, name="fleet"),
    path("pipelines/<int:pk>/", live_views.pipeline_page, name="pipeline"),
    path("nodes/<int:pk>/", live_views.node_page, name="node"),
    path("generations/<uuid:pk>/", generation_views.generation_page, name="generation"),
    # the page lived here before it absorbed the registry entry: old links keep working
    path("nodes/<int:pk>/live", RedirectView.as_view(pattern_name="console:node", permanent=True)),
    path("wall/", live_views.wall_page, name="wall"),
    path("wall/screen/", live_views.wall_screen, name="wall-screen"),
    path("wall/data", live_views.wall_data, name="wall-data"),
    path("wall/links/", live_views.wall_links_page, name="wall-links"),
    path("wall/links/<int:pk>/revoke", live_views.wall_link_revoke_view, name="wall-link-revoke"),
    path("alerts/", alert_views.alerts_page, name="alerts"),
    path("metrics", metrics_view, name="metrics"),
]
