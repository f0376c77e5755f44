"""Schemathesis over the whole REST schema: a few generated requests per operation, as an
admin, checked for server errors and for conformance to the schema (status codes, content
types, response bodies). A new endpoint is fuzzed the day it lands in the schema."""

import pytest
import schemathesis
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from drf_spectacular.generators import SchemaGenerator
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from fleet.accounts.models import ApiKey
from fleet.accounts.services import api_key_create

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
EXAMPLES_PER_OPERATION = 4

schema = schemathesis.openapi.from_dict(SchemaGenerator().get_schema(request=None, public=True))
schema.app = get_wsgi_application()


class AdminKey:
    """A valid admin key for every request: if the fuzzer revoked the key it was using (it
    may DELETE any api-keys/{id}), a new one is issued, so it can never lock itself out."""

    def __init__(self, admin):
        self.admin, self.key, self.plain = admin, None, None

    def headers(self) -> dict:
        if self.key is None or not ApiKey.objects.active().filter(pk=self.key.pk).exists():
            self.key, self.plain = api_key_create(user=self.admin, name="schemathesis")
        return {"Authorization": f"Bearer {self.plain}"}


@pytest.fixture
def admin_key(world, admin):
    # As Django's test client does: the WSGI handler must not close the test's connection
    # (and with it the transaction the test runs in) at the end of each request.
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    try:
        yield AdminKey(admin)
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)


@schema.parametrize()
@settings(
    max_examples=EXAMPLES_PER_OPERATION,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
@pytest.mark.filterwarnings("ignore")
@pytest.mark.slow  # ~25 s for ~46 operations on one core
def test_no_server_errors_and_the_schema_holds(case, admin_key):
    response = case.call(headers=admin_key.headers())
    case.validate_response(response, checks=CHECKS)
