"""Node registry routes, included under /api/v1/ (no trailing slashes).

GET    nodes                       viewer    list (?state=&role=&kind=&label=k:v&simulated=
                                             &profile=&search=&ordering=&limit=&cursor=),
                                             paged by cursor: follow next/previous
POST   nodes                       admin     register; the reply carries the token, once
GET    nodes/<id>                  viewer    one node, with an ETag "<version>"
PATCH  nodes/<id>                  admin     edit (If-Match or "version": stale -> 409)
DELETE nodes/<id>                  admin     retire (soft), 204
POST   nodes/<id>/drain            operator  online/registered/lost -> draining (*)
POST   nodes/<id>/return           operator  draining -> online (*)
POST   nodes/<id>/retire           admin     -> retired, tokens revoked
GET    nodes/<id>/tokens           admin     prefixes and dates, never secrets
POST   nodes/<id>/token/rotate     admin     revoke all, issue one (shown once), 201
POST   nodes/<id>/token/revoke     admin     revoke all
POST   nodes/<id>/heartbeat        node      the node's own agent (Bearer tdn_...) only
GET    profiles, profiles/<slug>   viewer    the hardware catalogue
POST   profiles, PATCH profiles/<slug>  admin

(*) routed by fleet/pipelines/urls_api.py: a node's state decides what its pipeline may route
to, so these go through the audited pipeline services (healthy-pair check, config push).
"""

from django.urls import re_path
from rest_framework.routers import SimpleRouter

from fleet.nodes import api

router = SimpleRouter(trailing_slash=False)
router.register("nodes", api.NodeViewSet, basename="node")
router.register("profiles", api.ProfileViewSet, basename="profile")

NODE = rf"^nodes/(?P<pk>{api.ID_REGEX})"

urlpatterns = [
    re_path(rf"{NODE}/heartbeat$", api.HeartbeatView.as_view(), name="node-heartbeat"),
    re_path(rf"{NODE}/retire$", api.NodeRetireView.as_view(), name="node-retire"),
    re_path(rf"{NODE}/tokens$", api.NodeTokenListView.as_view(), name="node-tokens"),
    re_path(rf"{NODE}/token/rotate$", api.NodeTokenRotateView.as_view(), name="node-token-rotate"),
    re_path(rf"{NODE}/token/revoke$", api.NodeTokenRevokeView.as_view(), name="node-token-revoke"),
    *router.urls,
]
