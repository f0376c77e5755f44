"""The engine host of a node worker: batching loops for drafters and verifiers.

Everything here runs in a node process and may import torch; what the web process shares
with it (keys, messages, the Redis client) is `inference.wire`.
"""
