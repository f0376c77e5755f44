"""The text room: token ids <-> text and chat messages -> prompt text, one place for the engine,
the node workers and the web side alike.

- `tokenizer`: the wrapper over ``tokenizers.Tokenizer`` (special ids, the chat prompt, a
  content hash drafters and verifiers compare).
- `chat_prompts`: the one renderer of a conversation (the model's template, ChatML, or a
  plain transcript).

Torch-free and Django-free (tests/test_walls.py guards it): the web process tokenizes
requests with it (`inference.serving.tokenization` keeps a loaded one per model directory)
without importing the engine.
"""
