"""The stream writer's chunks (`openai_stream._Writer`): written from a template encoded once
per choice, several tokens events of one choice that arrived together in one chunk, and
byte for byte what `openai_format.chunk` renders for the same text."""

from __future__ import annotations

import json

import pytest

from inference import wire
from inference.models import Generation
from inference.serving.openai_format import Choice, Job, chunk, sse_data
from inference.serving.openai_request import Options
from inference.serving.openai_stream import _Writer


def _job(*, chat: bool, n: int = 1, include_usage: bool = False) -> Job:
    options = Options(stream=True, include_usage=include_usage, n=n, best_of=n)
    choices = []
    for j in range(n):
        choice = Choice(Generation(), 0, "Hi", [1, 2])
        choice.index = j
        choices.append(choice)
    return Job(choices=choices, model='demo "pair"', chat=chat, options=options)


def _expected(job: Job, parts: list[tuple[int, str]], done: bool) -> list[bytes]:
    """What `chunk` renders: one chunk per (choice, text), then each choice's finish."""
    out = [sse_data(chunk(job, job.choices[i], text=text)) for i, text in parts]
    if done:
        for c in job.choices:
            c.finish_reason = "length"
            text = None if job.chat else ""
            out.append(sse_data(chunk(job, c, text=text, reason="length")))
    return out


@pytest.mark.parametrize("chat", [False, True])
@pytest.mark.parametrize("include_usage", [False, True])
def test_a_choices_events_that_came_together_are_one_chunk_equal_to_chunks_rendering(
    chat, include_usage
):
    job = _job(chat=chat, include_usage=include_usage)
    writer = _Writer(job)
    texts = ["Hé", 'l"o\n', "", " wörld ☃"]
    batch = [(0, wire.tokens_event([7], t, k + 1)) for k, t in enumerate(texts)]
    got = writer.chunks(batch) + writer.chunks([(0, wire.done_event("length", 2, 4))])

    reference = _job(chat=chat, include_usage=include_usage)
    reference.choices[0].generation = job.choices[0].generation
    reference.created = job.created
    assert got == _expected(reference, [(0, "".join(texts))], done=True)
    assert job.choices[0].sent_chars == len("".join(texts))
    assert job.choices[0].text == texts  # every event still folded into the choice
    assert json.loads(got[0][len(b"data: ") :])["choices"][0]["index"] == 0


@pytest.mark.parametrize("chat", [False, True])
def test_interleaved_choices_keep_their_order_and_indexes(chat):
    job = _job(chat=chat, n=2)
    writer = _Writer(job)
    batch = [
        (0, wire.tokens_event([1], "a", 1)),
        (0, wire.tokens_event([2], "b", 2)),
        (1, wire.tokens_event([3], "c", 1)),
        (0, wire.tokens_event([4], "d", 3)),
    ]
    got = writer.chunks(batch)
    reference = _job(chat=chat, n=2)
    for mine, theirs in zip(job.choices, reference.choices, strict=True):
        theirs.generation = mine.generation
    reference.created = job.created
    assert got == _expected(reference, [(0, "ab"), (1, "c"), (0, "d")], done=False)
    assert [c.sent_chars for c in job.choices] == [3, 1]


def test_with_logprobs_every_event_keeps_its_own_chunk():
    job = _job(chat=False)
    job.options.logprobs = 0
    writer = _Writer(job)
    batch = [(0, wire.tokens_event([1], "a", 1)), (0, wire.tokens_event([2], "b", 2))]
    assert len(writer.chunks(batch)) == 2
