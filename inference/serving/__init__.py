"""Everything the web process runs for inference: REST generations, OpenAI /v1, SSE,
request rules, tokenization."""
