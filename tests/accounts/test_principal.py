"""`principal_for`: who a self-authenticating view's request acts as (key, session, or a
refusal with the right status), and `require` for pages."""

import pytest
from django.core.exceptions import PermissionDenied
from django.test import RequestFactory

from fleet.accounts.principal import Refused, principal_for, require
from fleet.accounts.services import api_key_create

pytestmark = pytest.mark.django_db


def _request(token: str | None = None, user=None):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = RequestFactory().get("/", headers=headers, REMOTE_ADDR="10.2.3.4")
    if user is not None:
        request.user = user
    return request


def test_a_key_names_its_owner_and_a_session_counts_only_when_allowed(viewer, operator):
    _, key = api_key_create(user=viewer, name="k")
    assert principal_for(_request(key)) == viewer
    assert principal_for(_request(key, user=operator)) == viewer  # a sent key decides alone
    assert principal_for(_request(user=operator)) == operator
    with pytest.raises(Refused) as refused:
        principal_for(_request(user=operator), session=False)
    assert (refused.value.status, refused.value.code) == (401, "missing_credentials")


@pytest.mark.parametrize("token", ["tdm_deadbeef_wrong", "tdn_node_token", "garbage"])
def test_a_wrong_token_is_401_invalid(token):
    with pytest.raises(Refused) as refused:
        principal_for(_request(token))
    assert (refused.value.status, refused.value.code) == (401, "invalid_api_key")
    assert refused.value.response()["WWW-Authenticate"] == "Bearer"


def test_a_locked_out_address_gets_429_for_wrong_keys_and_the_right_key_still_works(
    settings, viewer
):
    settings.API_KEY_FAILURE_LIMIT = 2
    _, key = api_key_create(user=viewer, name="k")
    for i in range(2):
        with pytest.raises(Refused):
            principal_for(_request(f"tdm_{i:08x}_wrong"))
    with pytest.raises(Refused) as refused:
        principal_for(_request("tdm_00000009_wrong"))
    assert (refused.value.status, refused.value.code) == (429, "locked_out")
    response = refused.value.response()
    assert response.status_code == 429 and int(response["Retry-After"]) > 0
    assert principal_for(_request(key)) == viewer


def test_require_raises_403_unless_the_policy_allows(viewer, outsider):
    require(_request(user=viewer), "view")
    with pytest.raises(PermissionDenied):
        require(_request(user=viewer), "operate")
    with pytest.raises(PermissionDenied):
        require(_request(user=outsider), "view")
