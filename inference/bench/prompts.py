"""Prompt corpora of the benchmarks: held-out standard-library text as byte tokens (the demo
pair's language), and editing requests over short standard-library functions (chat prompts
whose answers mostly copy the prompt, as prompt lookup and n-gram drafters like)."""

from __future__ import annotations


def stdlib_prompts(n: int, length: int, seed: int) -> list[list[int]]:
    """``n`` held-out standard-library windows of ``length`` byte tokens."""
    from inference.training.corpus import heldout_prompts, load_corpus

    return heldout_prompts(load_corpus(), n, length, seed)


def function_sources(n: int) -> list[str]:
    """Source of a few short standard-library functions (skipping any without source)."""
    import inspect
    import posixpath
    import shlex
    import textwrap

    out = []
    for f in (
        textwrap.dedent,
        posixpath.relpath,
        shlex.join,
        textwrap.indent,
        posixpath.commonpath,
    ):
        try:
            out.append(inspect.getsource(f))
        except (OSError, TypeError):
            continue
    return (out * n)[:n] if out else ["def add(a, b):\n    return a + b\n"] * n


def docstring_request(tokenizer, source: str) -> list[int]:
    """An editing request: the answer mostly copies the prompt, as prompt lookup likes."""
    msg = (
        "Add a docstring to this Python function and return the whole function.\n\n"
        f"```python\n{source}\n```"
    )
    return tokenizer.encode(tokenizer.chat_prompt([{"role": "user", "content": msg}]))
