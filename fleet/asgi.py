"""ASGI entry point: HTTP through Django (but the OpenAI hot paths, POST /v1/completions and
/v1/chat/completions, through their front door: inference/serving/front_door.py), websockets
through Channels (auth checked in each consumer before accept)."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "fleet.settings")

from fleet.runtime.web_handler import get_asgi_application  # noqa: E402  (Django's, with sync lanes)

django_asgi_app = get_asgi_application(front="inference.serving.front_door")

from channels.auth import AuthMiddlewareStack  # noqa: E402  (needs Django set up first)
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from fleet.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)
