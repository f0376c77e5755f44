"""The engine host of a node worker: batching loops for drafters and verifiers.

Only `messaging` is safe to import from the web process; everything else imports torch.
"""
