from tests.pipelines.conftest import pipeline  # noqa: F401  (fixture)
