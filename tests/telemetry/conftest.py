import pytest

from fleet.telemetry.aggregator import LEADER_KEY
from fleet.telemetry.ingest import SHARDS, STREAMS, client
from fleet.telemetry.partials import PARTIALS
from fleet.telemetry.shards import LEASE_PREFIX, MEMBERS_KEY
from fleet.telemetry.snapshot import INTEREST_KEY, LIVE_KEY


@pytest.fixture(autouse=True)
def clean_live_state():
    """Each test starts with no snapshot, no interest marks and an empty stream."""
    client().delete(LIVE_KEY, INTEREST_KEY, LEADER_KEY, PARTIALS, MEMBERS_KEY, *STREAMS)
    client().delete(*[f"{LEASE_PREFIX}{i}" for i in range(SHARDS)])
    yield
