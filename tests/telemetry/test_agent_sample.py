"""The worker agent's sample: after k is lowered, positions no draft had are reported with
0 drafts (the engine's per-position lists keep their old width), so the aggregator does not
read them as drafted and rejected."""

import queue
import threading
import types

import pytest

from fleet.telemetry.accumulators import Acc, derive
from fleet.telemetry.samples import normalize
from inference.engine.counters import SpecCounters
from inference.worker.agent import Agent
from inference.worker.live_figures import LoopStats


class FakeLoop:
    role = "verify"
    pipeline_id = 1

    def __init__(self):
        self.engine = types.SimpleNamespace(counters=SpecCounters(), device="cpu")
        self.stats = LoopStats()
        self.inbox: queue.Queue = queue.Queue()
        self.prepared = threading.Event()  # the loop's start-up sweep
        self.prepared.set()

    def slots(self):
        return {"seqs": [], "slots_used": 0, "n_slots": 8}

    def rounds(self, n: int, *, k: int, accepted: int) -> None:
        for _ in range(n):
            self.engine.counters.record_round(k, accepted, accepted + 1)
            self.stats.record_round(1, 0.001, accepted + 1)


def test_agent_reports_the_positions_each_interval_drafted(settings):
    settings.HEARTBEAT_PERIOD_S = 1
    loop = FakeLoop()
    profile = {"idle_w": 10.0, "tdp_w": 65.0}
    agent = Agent(node_id=1, profile=profile, loop=loop, token="tdn_x_y", api_url="http://unused")
    loop.rounds(100, k=4, accepted=3)
    first = agent.sample()
    assert first["num_accepted_tokens_per_pos"] == [100, 100, 100]
    assert first["num_draft_tokens_per_pos"] == [100, 100, 100, 100]
    loop.rounds(100, k=2, accepted=2)  # k lowered: every draft accepted
    second = agent.sample()
    assert second["num_accepted_tokens_per_pos"] == [100, 100, 0]  # the old width stays
    assert second["num_draft_tokens_per_pos"] == [100, 100, 0, 0]
    acc = Acc()
    acc.add_sample(normalize(second))
    stats = derive(acc, 1.0)
    assert stats["acceptance_rate"] == 1.0
    assert stats["alpha"] == pytest.approx(1.0)  # was 2/3: positions 2, 3 read as rejected
    assert stats["per_position_acceptance"] == [1.0, 1.0]


def test_no_engine_counters_before_the_start_up_sweep_is_done():
    """The sweep runs verifies on the engine and then undoes their counts: read meanwhile,
    the counters went up and then back down, a negative delta, and the sample was refused."""
    from fleet.telemetry.samples import normalize

    loop = FakeLoop()
    loop.prepared.clear()
    profile = {"idle_w": 10.0, "tdp_w": 65.0}
    agent = Agent(node_id=1, profile=profile, loop=loop, token="tdn_x_y", api_url="http://unused")
    loop.rounds(10, k=4, accepted=3)  # the sweep's
    assert agent.sample()["num_drafts"] == 0
    loop.engine.counters = SpecCounters()  # the sweep undone
    loop.prepared.set()
    loop.rounds(5, k=4, accepted=3)
    normalize(s := agent.sample())
    assert s["num_drafts"] == 5
