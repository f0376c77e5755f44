"""What the nodes app tells whoever listens, without importing them (nodes sit below pipelines).

`node_leaving` is sent inside the transaction of a change that takes a node's capacity away
for good (retire, revoking its tokens), with `node` and `force`. A receiver that must forbid it
raises (the pipelines app: the last healthy drafter or verifier of a pipeline, 409 unless
`force`), and the change rolls back."""

from django.dispatch import Signal

node_leaving = Signal()
