"""Shared fixtures: the personas every permission test uses.

alice is a viewer, bob an operator, carol an admin, mallory an authenticated outsider with
no role. (Node-agent personas live with the nodes tests.)
"""

import os
from collections import Counter
from pathlib import Path

import pytest
from django.test.utils import override_settings
from rest_framework.test import APIClient

from fleet.accounts.services import api_key_create
from tests.factories import PASSWORD
from tests.factories import user as _user

__all__ = ["PASSWORD", "client_for"]  # PASSWORD: tests.factories's, imported from here too


@pytest.fixture
def viewer(db):
    return _user("alice", "viewer")


@pytest.fixture
def operator(db):
    return _user("bob", "operator")


@pytest.fixture
def admin(db):
    return _user("carol", "admin")


@pytest.fixture
def outsider(db):
    return _user("mallory", None)


@pytest.fixture
def personas(viewer, operator, admin, outsider):
    return {"viewer": viewer, "operator": operator, "admin": admin, "outsider": outsider}


@pytest.fixture
def api():
    """An unauthenticated API client."""
    return APIClient()


def client_for(user) -> APIClient:
    """An API client authenticated with a real API key of `user` (Bearer)."""
    client = APIClient()
    if user is not None:
        _, plain = api_key_create(user=user, name="test")
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {plain}")
    return client


@pytest.fixture
def as_persona(personas):
    """`as_persona("operator")` -> an API client for that persona; "anonymous" -> none."""
    return lambda name: client_for(personas.get(name))


@pytest.fixture(autouse=True, scope="session")
def _fast_passwords():
    """One password hasher for the whole run: PBKDF2's million rounds cost ~0.3 s a user
    (personas are created per test) and test nothing of ours. The setting_changed signal
    clears Django's hasher cache. Processes a test starts (`up`, workers) keep the real one."""
    with override_settings(PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"]):
        yield


@pytest.fixture(scope="session")
def demo_pair(request, tmp_path_factory) -> Path:
    """The full demo pair's models directory, trained once for the whole run (minutes of
    both cores; see tests/demo_pair.py). Shared: read it, never write into it."""
    from tests.demo_pair import trained_pair

    cache = os.environ.get("TANDEM_TEST_CACHE")
    if cache:
        return trained_pair(Path(cache))
    pytest_cache = getattr(request.config, "cache", None)  # absent with -p no:cacheprovider
    if pytest_cache is not None:
        return trained_pair(pytest_cache.mkdir("tandem"))
    return trained_pair(tmp_path_factory.getbasetemp() / "tandem-cache")


@pytest.fixture(autouse=True)
def _no_api_key_lockout():
    """API-key failures are counted in Redis, which outlives a test: start each at zero."""
    from fleet.accounts import key_throttle

    key_throttle.reset_all()


def _serialized(item) -> bool:
    marker = item.get_closest_marker("django_db")
    return bool(marker and marker.kwargs.get("serialized_rollback"))


def _transactional(item) -> bool:
    marker = item.get_closest_marker("django_db")
    if marker and marker.kwargs.get("transaction"):
        return True
    return bool({"transactional_db", "live_server"} & set(getattr(item, "fixturenames", ())))


# Modules whose tests share one expensive module-scoped fixture (a real `up`, a browser):
# under pytest-xdist (`--dist loadgroup`, .ci/run) each stays on one worker, started once.
ONE_WORKER = ("tests/browser/", "tests/newcomer/test_first_minute.py", "tests/eval/")


@pytest.hookimpl(tryfirst=True, specname="pytest_collection_modifyitems")
def pytest_collection_modifyitems_unique_ids(items):
    """Give every test its own node id, and refuse a collection where two share one.

    Schemathesis names each operation's test ``test_x[GET /path]`` but leaves every one the
    node id ``test_x``. pytest runs them all, one process at a time; pytest-xdist schedules by
    node id, so under ``-n 2`` the 63 operations collapsed into one test and 62 were never run,
    with no error (session 16: each pass reported 62 fewer tests than it collected)."""
    for item in items:
        if not item.nodeid.endswith("::" + item.name):
            item._id = type(item._id).parse(f"{item.nodeid.rsplit('::', 1)[0]}::{item.name}")
    twice = sorted(i for i, n in Counter(item.nodeid for item in items).items() if n > 1)
    if twice:
        raise pytest.UsageError(f"tests share a node id (xdist would run one of each): {twice[:5]}")


@pytest.hookimpl(tryfirst=True, specname="pytest_collection_modifyitems")  # before xdist's
def pytest_collection_modifyitems_xdist_groups(items):
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        if path.startswith(ONE_WORKER):
            item.add_marker(pytest.mark.xdist_group(path))


@pytest.hookimpl(trylast=True, specname="pytest_collection_modifyitems")
def pytest_collection_modifyitems_serialized_first(items):
    """Run serialized-rollback tests first among the transactional ones (after pytest-django
    has put plain db tests first). A transactional test without it flushes the database and
    re-creates content types at teardown; a serialized test after it would then restore the
    same rows again and fail on their unique constraints, depending on the order chosen."""
    first = next((i for i, item in enumerate(items) if _transactional(item)), None)
    if first is None:
        return
    tail = items[first:]
    tail.sort(key=lambda item: 0 if _serialized(item) else 1)  # stable: keeps the rest's order
    items[first:] = tail


# The PostgreSQL pass of .ci/run (`--database-tests-only`): the tests whose outcome the
# database can change, i.e. those that use it (a django_db marker, a database fixture, a live
# server), less those that drive a browser: their pages' queries are the views' queries, which
# the view and API tests run on PostgreSQL, and they were half of that pass's time (~500 of
# ~1,000 s on 2 cores). A test without a database gives the same answer on either.
DATABASE_FIXTURES = {"db", "transactional_db", "live_server", "django_db_serialized_rollback"}


def uses_the_database(item) -> bool:
    if item.get_closest_marker("django_db"):
        return True
    return bool(DATABASE_FIXTURES & set(getattr(item, "fixturenames", ())))


def pytest_addoption(parser):
    parser.addoption(
        "--database-tests-only",
        action="store_true",
        help="run only the tests that use the database and drive no browser (.ci/run's "
        "PostgreSQL pass)",
    )


@pytest.hookimpl(tryfirst=True, specname="pytest_collection_modifyitems")
def pytest_collection_modifyitems_database_only(config, items):
    if not config.getoption("--database-tests-only"):
        return
    keep: list = []
    drop: list = []
    for item in items:
        wanted = uses_the_database(item) and not item.get_closest_marker("browser")
        (keep if wanted else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
