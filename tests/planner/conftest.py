import pytest

from tests.pipelines.conftest import pipeline  # noqa: F401  (fixture)


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
