"""Chat messages -> the prompt text a model was trained on: the one renderer, torch-free and
Django-free so both the web process (which tokenizes requests) and a node process may use it.

The model's own chat template when it has one (tokenizer_config.json; SmolLM2's adds its
default system turn); else ChatML when the tokenizer knows its special tokens (Qwen2);
otherwise a plain `role: content` transcript (the byte-level demo model). Every way ends on
the assistant's turn, opened.
"""

from __future__ import annotations

import functools

CHATML_START, CHATML_END = "<|im_start|>", "<|im_end|>"


def render(
    messages: list[dict[str, str]],
    *,
    template: str | None,
    chatml: bool,
    add_generation_prompt: bool = True,
) -> str:
    """The prompt text; `add_generation_prompt` False leaves the assistant's turn unopened
    (what `/tokenize` may ask for, as transformers' apply_chat_template)."""
    if template:
        return compiled(template).render(
            messages=messages, add_generation_prompt=add_generation_prompt
        )
    if chatml:
        body = "".join(f"{CHATML_START}{m['role']}\n{m['content']}{CHATML_END}\n" for m in messages)
        return body + (f"{CHATML_START}assistant\n" if add_generation_prompt else "")
    body = "".join(f"{m['role']}: {m['content']}\n" for m in messages)
    return body + ("assistant:" if add_generation_prompt else "")


def knows_chatml(tk) -> bool:
    """Does a `tokenizers.Tokenizer` have ChatML's two special tokens?"""
    return tk.token_to_id(CHATML_START) is not None and tk.token_to_id(CHATML_END) is not None


@functools.lru_cache(maxsize=16)
def compiled(template: str):
    """A chat template compiled as transformers does: sandboxed (it comes with the model),
    blocks trimmed. Raises jinja2's TemplateSyntaxError for a broken one."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(template)
