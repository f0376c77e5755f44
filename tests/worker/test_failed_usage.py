"""A generation that ends without its verifier's finish (failed by the watchdog, a lost node,
a refused finish; or cancelled) keeps the tokens that were streamed to its client: its row's
usage is what the client got, not 0."""

from __future__ import annotations

from inference import services, wire
from inference.models import Generation
from tests.worker.helpers import make_pipeline


def _running(name: str) -> Generation:
    pipeline, [(verifier, _, _)] = make_pipeline(name, "t", "", kind="none")
    return Generation.objects.create(
        pipeline=pipeline, prompt_tokens=[1], verifier=verifier, attempts=1, state="running"
    )


def test_a_failed_generation_records_the_tokens_it_streamed(db):
    gen = _running("usage-fail")
    wire.publish(gen.pk, wire.tokens_event([7, 8], "ab", 2), node=gen.verifier_id)
    wire.publish(gen.pk, wire.requeued_event("drafter lost"), node=gen.verifier_id)
    wire.publish(gen.pk, wire.tokens_event([9], "c", 3), node=gen.verifier_id)
    services.generation_fail(generation=gen, error="drafter-0 (drafter) is lost")
    gen.refresh_from_db()
    assert (gen.state, gen.output_tokens, gen.output_text) == ("failed", [7, 8, 9], "abc")


def test_a_cancelled_generation_records_the_tokens_it_streamed(db):
    gen = _running("usage-cancel")
    wire.publish(gen.pk, wire.tokens_event([5], "x\x00", 1), node=gen.verifier_id)
    services.generation_cancel(generation=gen)
    gen.refresh_from_db()
    assert (gen.state, gen.output_tokens, gen.output_text) == ("cancelled", [5], "x\ufffd")


def test_nothing_streamed_leaves_the_row_empty(db):
    gen = _running("usage-none")
    services.generation_fail(generation=gen, error="deadline exceeded")
    gen.refresh_from_db()
    assert (gen.state, gen.output_tokens, gen.output_text) == ("failed", [], "")
