"""Tandem's data-plane engine: pure PyTorch, no Django or Celery imports.

Modules, one job each: ``config`` (HF config.json), ``model`` (Llama-family decoder),
``kv_cache`` (static slot cache), ``loading`` (safetensors/GGUF), ``tokenizer``,
``sampling``, ``rejection``, ``drafters``, ``engines`` (split draft/verify engines and the
in-process generator), ``counters`` (vLLM-named speculative-decoding counters).
"""
