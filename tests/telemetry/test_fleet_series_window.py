"""The wall's fleet series reads the real and the simulated nodes' rollups over one window:
read a moment apart, a bucket on the window's edge was in one series and not the other, and
the wall drew a gap in the simulated line (CI: test_live_figures saw None there)."""

from datetime import timedelta

from django.utils import timezone

from fleet.telemetry import rollups
from fleet.telemetry.merge import FLEET_REAL, FLEET_SIMULATED
from fleet.telemetry.models import Rollup


def test_real_and_simulated_series_share_one_window(db, monkeypatch):
    base = timezone.now()
    edge = base - timedelta(minutes=30) + timedelta(milliseconds=1)
    for scope_id, watts in ((FLEET_REAL, 30.0), (FLEET_SIMULATED, 55.0)):
        Rollup.objects.create(
            scope="fleet",
            scope_id=scope_id,
            resolution_s=10,
            start=edge,
            data={"power_draft_w": watts, "power_w": watts},
        )
    calls = iter(range(1000))
    # every read of the clock 5 ms after the one before (a loaded machine)
    monkeypatch.setattr(
        rollups.timezone, "now", lambda: base + timedelta(milliseconds=5 * next(calls))
    )
    out = rollups.fleet_series(minutes=30)
    assert out["power_draft_w"] == [30.0]
    assert out["simulated_power_draft_w"] == [55.0]
