"""Per-request speculative-decoding figures in /v1 responses, when the request asks for
them with `"return_spec_metrics": true` (vLLM turns them on server-wide with
`--per-request-spec-decode-metrics`; Tandem lets each request choose).

The answer gets `"metrics": {"speculative_decoding": {...}}` where vLLM puts it: in the body,
or on a stream's last chunk (the usage chunk with `stream_options.include_usage`, else the
last finish chunk). The figures come from the verifier's counters of each finished
generation (its done event's `spec`, `inference.wire`), summed over the request's
generations (prompts x samples, as `usage` counts them):

- the /metrics counters' names: `num_drafts`, `num_draft_tokens`, `num_accepted_tokens`,
  `num_accepted_tokens_per_pos` (accepted at draft position i), `num_draft_tokens_per_pos`
  (drafts that had a position i);
- vLLM's per-request names: `num_spec_steps` (= num_drafts), `num_accepted_draft_tokens`
  (= num_accepted_tokens), `num_spec_tokens` (the longest draft), `draft_acceptance_rate`
  (accepted / drafted; null without drafts), `mean_acceptance_length` (1 + accepted /
  drafts), `acceptance_histogram` (rounds that accepted exactly 0, 1, ... tokens).

A generation that was re-routed counts its last attempt only (the verifier that finished
it); one ended by the control plane (cancelled) has no counters: with none at all,
`speculative_decoding` is null.
"""

from __future__ import annotations

from collections.abc import Iterable


def _add(into: list[int], values) -> None:
    for i, value in enumerate(values or ()):
        if i < len(into):
            into[i] += int(value)
        else:
            into.append(int(value))


def speculative_decoding(specs: Iterable[dict | None]) -> dict | None:
    """The figures of a request from its generations' `spec` dicts (None: none reported)."""
    drafts = draft_tokens = accepted = 0
    per_pos: list[int] = []
    draft_per_pos: list[int] = []
    seen = False
    for spec in specs:
        if not spec:
            continue
        seen = True
        drafts += int(spec.get("num_drafts") or 0)
        draft_tokens += int(spec.get("num_draft_tokens") or 0)
        accepted += int(spec.get("num_accepted_tokens") or 0)
        _add(per_pos, spec.get("num_accepted_tokens_per_pos"))
        _add(draft_per_pos, spec.get("num_draft_tokens_per_pos"))
    if not seen:
        return None
    k = max(len(draft_per_pos), len(per_pos))
    reached = [drafts, *per_pos, *([0] * (k - len(per_pos)))]  # rounds accepting >= j
    histogram = [reached[j] - reached[j + 1] for j in range(k)] + [reached[k]]
    return {
        "num_drafts": drafts,
        "num_draft_tokens": draft_tokens,
        "num_accepted_tokens": accepted,
        "num_accepted_tokens_per_pos": per_pos,
        "num_draft_tokens_per_pos": draft_per_pos,
        "num_spec_steps": drafts,
        "num_accepted_draft_tokens": accepted,
        "num_spec_tokens": k,
        "draft_acceptance_rate": accepted / draft_tokens if draft_tokens else None,
        "mean_acceptance_length": 1 + accepted / drafts if drafts else 1.0,
        "acceptance_histogram": histogram,
    }


def metrics(choices) -> dict:
    """The response's `metrics` object for the request's choices."""
    return {"speculative_decoding": speculative_decoding(c.spec for c in choices)}
