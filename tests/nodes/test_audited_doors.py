"""Node retire and token revoke/rotate go through the audit log's one door: who, what, and
on which node (issue 25: they skipped it)."""

import pytest

from fleet.audit.models import AuditEvent
from tests.nodes.conftest import make_node

pytestmark = pytest.mark.django_db


def test_token_rotate_revoke_and_retire_are_audited_with_the_admin(personas, as_persona):
    node, _ = make_node()
    carol = as_persona("admin")
    base = f"/api/v1/nodes/{node.pk}"
    rotated = carol.post(f"{base}/token/rotate")
    assert rotated.status_code == 201
    assert carol.post(f"{base}/token/revoke").json() == {"revoked": 1}
    assert carol.post(f"{base}/retire").json()["state"] == "retired"
    rotate, revoke, retire = AuditEvent.objects.filter(node=node).order_by("id")
    assert [e.action for e in (rotate, revoke, retire)] == [
        "node.token_rotate",
        "node.tokens_revoke",
        "node.retire",
    ]
    assert {e.actor for e in (rotate, revoke, retire)} == {personas["admin"]}
    assert rotate.after == {"token": rotated.json()["prefix"]}  # the prefix, never the secret
    assert rotated.json()["token"] not in str(rotate.after)
    assert revoke.after == {"revoked": 1}
    assert retire.before == {"state": "registered"} and retire.after == {"state": "retired"}
