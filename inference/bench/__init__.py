"""Benchmarks of the engine against Hugging Face transformers (pure Python, no Django)."""
