"""Drafts that learn from the fleet's own traffic (DESIGN.md flow 6, issue 22 item 2).

Per pipeline, off by default (`LearningPolicy.enabled`, an operator's choice):

- `capture`: the prompt and output tokens of finished generations become `CapturedPair`
  rows (content: read by those who may read the generation's, `can(user, "read_content")`),
  purged after the policy's retention;
- `tasks.train_draft_version` (queue `train`) distils the serving draft on recent pairs into
  the next `DraftVersion` (a directory written whole; a failed or killed run leaves the
  serving draft untouched);
- `canary`: the candidate drafts a share of sequences (`split.in_canary`, the same function
  on the drafter and here); paired acceptance and goodput promote or reject it; a promoted
  version whose acceptance collapses is rolled back. Every step is an audit event (and so a
  chart marker).
"""
