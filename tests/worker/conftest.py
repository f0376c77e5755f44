from tests.worker.loop_harness import wired  # noqa: F401  (the loops' fixture, for this directory)
