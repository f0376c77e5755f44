"""The drafter's loop feeds adaptive k: its start-up sweep, its propose times, the verifier's
costs and round trip and the acceptance that come back with the results all reach the choice
(before, `DraftLoop.measured` was never filled and an adaptive pipeline drafted its starting
k forever). A fake engine keeps it fast; tests/worker/test_loops.py runs the real ones."""

from __future__ import annotations

import time

from inference.engine.messages import Draft
from inference.worker.draft import DraftLoop


class FakeDrafter:
    def __init__(self):
        self.seqs: dict[str, list[int]] = {}

    def add_many(self, items):
        for sid, ids, _ in items:
            self.seqs[sid] = list(ids)

    def propose(self, requests):
        time.sleep(0.0002 * max((k for _, k in requests), default=0))
        return [Draft(sid, [7] * k, None) for sid, k in requests], max(k for _, k in requests)

    def commit(self, sid, tokens, n_accepted):
        self.seqs[sid].extend(tokens)

    def free(self, sid):
        self.seqs.pop(sid, None)


class FakeEngine:
    n_free = None

    def __init__(self):
        self.drafter = FakeDrafter()

    def add_many(self, items):
        self.drafter.add_many(items)

    def propose(self, requests):
        return self.drafter.propose(requests)[0]

    def commit(self, sid, tokens, n_accepted):
        self.drafter.commit(sid, tokens, n_accepted)

    def free(self, sid):
        self.drafter.free(sid)


VERIFY_COSTS = [[b, t, 0.010, 5] for b in (1, 2, 4, 8) for t in range(1, 10)]  # memory-bound


def make_loop(monkeypatch, sent):
    loop = DraftLoop(
        engine=FakeEngine(),
        node_id=2,
        pipeline_id=1,
        config={"k_policy": {"mode": "adaptive", "k_min": 0, "k_max": 8, "k": 4}},
    )
    monkeypatch.setattr(loop, "send", lambda node, kind, p: sent.append((node, kind, p)))
    monkeypatch.setenv("TANDEM_COST_SWEEP_S", "0.5")
    loop.prepare()
    gens = [f"g{i}" for i in range(8)]
    ctx = {"ctx": [1, 2, 3], "params": {"temperature": 0.0}, "attempt": 1}
    loop.handle("draft_start", {"verifier": 1, "seqs": [{"gen": g, **ctx} for g in gens]})
    return loop, gens


def rounds(loop, sent, n, *, accept, next_token=7, costs=VERIFY_COSTS):
    """n rounds: the loop drafts (token 7), the 'verifier' accepts `accept(k)` of each draft
    and emits `next_token` after them (7: what the drafter would have drafted next)."""
    ks = []
    for _ in range(n):
        loop.step()
        node, kind, p = sent.pop()
        assert kind == "drafts" and node == 1
        k = len(p["drafts"][0]["tokens"])
        ks.append(k)
        n_acc = {d["seq_id"]: min(accept(k), len(d["tokens"])) for d in p["drafts"]}
        results = [
            {
                "seq_id": d["seq_id"],
                "tokens": [7] * n_acc[d["seq_id"]] + [next_token],
                "n_accepted": n_acc[d["seq_id"]],
                "finished": False,
            }
            for d in p["drafts"]
        ]
        payload = {"verifier": 1, "results": results, "verify_s": 0.010, "vbatch": 8}
        if len(ks) == 1:
            payload["costs"] = costs
        loop.handle("results", payload)
    return ks


def test_the_sweep_measures_draft_costs_before_the_first_round(monkeypatch):
    loop, _ = make_loop(monkeypatch, [])
    assert len(loop.adaptive.draft_costs) > 0
    assert loop.adaptive.sweep_s is not None and loop.adaptive.sweep_s < 5


def test_measurements_reach_the_choice_and_k_moves_when_acceptance_drops(monkeypatch):
    sent: list = []
    loop, _ = make_loop(monkeypatch, sent)
    high = rounds(loop, sent, 15, accept=lambda k: k)  # every draft accepted
    assert high[-1] >= 4
    low = rounds(loop, sent, 20, accept=lambda k: 0, next_token=9)  # nothing accepted
    settled = next(i for i, k in enumerate(low) if k == 0)
    assert settled <= 20 and set(low[settled:]) == {0}
    snap = loop.inspect()["adaptive"]
    assert snap["verify_costs"] and snap["draft_costs"] and snap["hop_ms"] is not None
    assert loop.stats.snapshot()["k_rounds"]["8:0"] >= 1  # k by batch size, for telemetry


def test_shadow_drafts_at_k0_bring_drafting_back(monkeypatch):
    sent: list = []
    loop, _ = make_loop(monkeypatch, sent)
    rounds(loop, sent, 20, accept=lambda k: 0, next_token=9)
    assert loop.adaptive.current.get(8) == 0
    # the shadow drafted token 7 for a few sequences; the verifier now emits 7 again
    back = rounds(loop, sent, 40, accept=lambda k: k)
    assert max(back) > 0


def test_shadow_drafts_keep_to_their_share_of_the_drafters_time(monkeypatch):
    """A model drafter's shadow draft is a forward pass on the cores the verifier uses, once
    a round at k 0. Within SHADOW_BUDGET of the drafter's time it runs every few rounds; a
    free one, every round."""
    shadows = {}
    for cost_s in (0.0, 0.02):
        sent: list = []
        loop, _ = make_loop(monkeypatch, sent)
        rounds(loop, sent, 20, accept=lambda k: 0, next_token=9)
        assert loop.adaptive.current.get(8) == 0
        calls: list[int] = []
        propose = loop.engine.drafter.propose

        def timed(requests, propose=propose, cost_s=cost_s, calls=calls):
            if requests and all(k == 1 for _, k in requests):  # a shadow draft
                calls.append(1)
                time.sleep(cost_s)
            return propose(requests)

        monkeypatch.setattr(loop.engine.drafter, "propose", timed)
        for _ in range(40):  # rounds of ~10 ms
            rounds(loop, sent, 1, accept=lambda k: 0, next_token=9)
            time.sleep(0.01)
        shadows[cost_s] = len(calls)
    assert shadows[0.0] >= 36  # every round at k 0 (a round may explore a k > 0)
    # 0.1 of ~0.4-0.6 s, and the credit saved before (at most 0.1 s): ~8 of 20 ms each
    assert 2 <= shadows[0.02] <= 12, shadows


def test_only_a_sequences_own_peers_act_on_it(monkeypatch):
    """Within a pipeline too, a node acts only as itself: drafts for a sequence come from its
    own drafter (`wire.receive` names the real sender), results and cancels from its own
    verifier; another node's word is ignored."""
    from types import SimpleNamespace

    from inference.worker.verify import VerifyLoop, VSeq

    v = VerifyLoop(engine=SimpleNamespace(tokenizer=None), node_id=1, pipeline_id=1, config={})
    v.seqs["g"] = VSeq("g", 1, 5, 1, 0, detok=None)  # type: ignore[arg-type]
    draft = {"seq_id": "g", "tokens": [3], "probs": None}
    v.handle("drafts", {"drafter": 6, "drafts": [draft], "plain": ["g"]})
    assert "g" not in v.pending and v.seqs["g"].drafter == 5
    v.handle("drafts", {"drafter": 5, "drafts": [draft]})
    assert "g" in v.pending

    sent: list = []
    d, gens = make_loop(monkeypatch, sent)
    d.handle("cancel", {"gen": gens[0], "verifier": 99})  # not its verifier: ignored
    assert gens[0] in d.verifier_of
    d.handle("cancel", {"gen": gens[0], "verifier": 1})
    assert gens[0] not in d.verifier_of


class SparseDrafter(FakeDrafter):
    """An n-gram table's way: it proposes only for the sequences it has a match for (a
    quarter of them here), and what it proposes is always right."""

    def propose(self, requests):
        drafts = [Draft(sid, [7] * k if sid in ("g0", "g4") else [], None) for sid, k in requests]
        return drafts, max(k for _, k in requests)


def test_a_drafter_that_proposes_for_few_sequences_settles_at_k0(monkeypatch):
    """Acceptance counts the drafts asked for, not only those returned: a drafter with
    nothing to propose for most sequences (n-gram, no match) made every proposal look
    accepted, and adaptive k drafted 4 where plain decoding wins. Verify costs 10 ms + 4 ms a
    token: k=4 predicts 2 tokens a sequence in 30 ms, below plain's 1 in 14 ms."""
    sent: list = []
    loop, _ = make_loop(monkeypatch, sent)
    loop.engine.drafter = SparseDrafter()
    loop.engine.drafter.add_many([(g, [1, 2, 3], None) for g in loop.verifier_of])
    costs = [[b, t, 0.010 + 0.004 * t, 5] for b in (1, 2, 4, 8) for t in range(1, 10)]
    ks = rounds(loop, sent, 30, accept=lambda k: k, costs=costs)
    assert set(ks[-10:]) == {0}, ks
    assert loop.adaptive.acceptance.per_position(1)[0] < 0.5


def _timed_rounds(loop, sent, n, *, verifier_s, stall_s):
    """n rounds in which the 'verifier' holds the drafts `verifier_s` (a 2 ms forward, the
    rest prefills of new sequences) and reports `stall_s` of prefills."""
    for _ in range(n):
        loop.step()
        _node, kind, p = sent.pop()
        assert kind == "drafts"
        time.sleep(verifier_s)
        results = [
            {"seq_id": d["seq_id"], "tokens": [7], "n_accepted": 0, "finished": False}
            for d in p["drafts"]
        ]
        payload = {"verifier": 1, "results": results, "verify_s": 0.002, "vbatch": 8}
        loop.handle("results", {**payload, "stall_s": stall_s})


def test_round_periods_price_the_rest_of_a_round_but_not_the_prefills_that_held_it(monkeypatch):
    held = {}
    for stall_s in (0.0, 0.018):
        sent: list = []
        loop, _ = make_loop(monkeypatch, sent)
        loop.config["k_policy"] = {"mode": "fixed", "k": 2}
        _timed_rounds(loop, sent, 12, verifier_s=0.020, stall_s=stall_s)
        held[stall_s] = loop.adaptive.rest_costs.measured(8, 2)
    # unreported, the 18 ms of prefills look like the round's own; reported, they are not
    assert held[0.0] is not None and held[0.0] > 0.012
    assert held[0.018] is not None and held[0.018] < 0.008


def test_the_rounds_measured_rates_calibrate_the_model_that_chose_their_k(monkeypatch):
    """Each round's tokens per sequence over its period reach adaptive k beside what the model
    predicted for the k that ran: a round of 8 sequences, 1 token each, every ~20 ms is ~50
    tokens per sequence-second."""
    sent: list = []
    loop, _ = make_loop(monkeypatch, sent)
    predicted = 25.0  # the model's rate for whatever k it chooses: measured is twice that
    monkeypatch.setattr(
        loop.adaptive,
        "goodput_by_k",
        lambda batch, k_min, k_max: {k: predicted * 8 for k in range(k_min, k_max + 1)},
    )
    loop.adaptive.merge_verify_costs(VERIFY_COSTS)
    _timed_rounds(loop, sent, 12, verifier_s=0.020, stall_s=0.0)
    calibration = loop.adaptive.calibration
    assert calibration and all(b == 8 for b, _ in calibration), calibration
    ratio, _ = next(iter(calibration.values()))
    assert 1.3 < ratio <= 2.0, calibration  # moving from 1 towards ~2 (50 measured / 25)
    assert loop.adaptive.snapshot()["calibration"]
