"""Benchmarks, one module per question, each behind a `manage.py bench_*` command:

- ``engine`` (``bench_engine``): our engine against Hugging Face transformers on the demo pair
  and SmolLM2, in one process (pure Python: no Django); ``models``, ``prompts`` and ``timing``
  are its parts, ``preset`` (``bench_engine --preset``) the roofline run on random weights;
- ``serving`` (``bench_serving``): concurrent clients through the real API and node workers
  (Django, daphne, Redis, subprocesses) against the same prompts in one process;
- ``planner`` (``bench_planner``): the planner's predictions against the real engine;
- ``step_curves`` (``python -m inference.bench.step_curves``): verify step time vs batch and k.

The telemetry benchmark (``bench_telemetry``) lives with telemetry, in ``fleet/telemetry``.
"""
