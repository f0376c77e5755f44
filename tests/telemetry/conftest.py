import pytest

from fleet.telemetry.aggregator import LEADER_KEY
from fleet.telemetry.ingest import STREAM, client
from fleet.telemetry.snapshot import INTEREST_KEY, LIVE_KEY


@pytest.fixture(autouse=True)
def clean_live_state():
    """Each test starts with no snapshot, no interest marks and an empty stream."""
    client().delete(LIVE_KEY, INTEREST_KEY, STREAM, LEADER_KEY)
    yield
