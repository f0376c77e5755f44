"""Logprobs in the OpenAI API's shapes, from what the verifier streams (token ids and
``[logprob, [[id, logprob], ...]]`` entries, see ``inference/engine/logprobs.py``).

Completions (legacy): ``{"tokens", "token_logprobs", "top_logprobs", "text_offset"}``, one
item per token; ``top_logprobs`` maps token text to logprob and also holds the sampled token
(so up to N + 1 entries, as OpenAI and vLLM do; tokens that decode to the same text, such
as byte tokens that are each "\ufffd" alone, share a key holding the larger logprob); an
echoed prompt's first token has ``null`` logprob and ``null`` top_logprobs. ``text_offset``
is each token's offset in the choice's returned text (vLLM's convention).

Chat: ``{"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob",
"bytes"}, ...]}], "refusal": null}``.

Token texts are decoded one id at a time on the web side (no torch: the ``tokenizers``
tokenizer of the pipeline). For byte-level BPE models a token's ``bytes`` are its exact bytes,
so a character split over tokens is rebuilt by joining them.
"""

from __future__ import annotations

from tokenizers import decoders

from inference.serving.tokenization import ModelTokenizer

_texts: dict[tuple[str, int], tuple[str, bytes]] = {}
_byte_of: dict[str, int] | None = None


def _unicode_to_byte() -> dict[str, int]:
    """The inverse of GPT-2's byte -> printable character map (what ByteLevel BPE stores:
    the same table as inference/training/byte_tokenizer.py, which the web side may not
    import)."""
    global _byte_of
    if _byte_of is None:
        bs = list(range(ord("!"), ord("~") + 1))
        bs += list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
        cs, n = bs[:], 0
        for b in range(256):
            if b not in bs:
                bs.append(b)
                cs.append(256 + n)
                n += 1
        _byte_of = {chr(c): b for b, c in zip(bs, cs, strict=True)}
    return _byte_of


def token(tok: ModelTokenizer, token_id: int) -> tuple[str, bytes]:
    """(text, bytes) of one token, cached per model."""
    key = (str(tok.path), token_id)
    hit = _texts.get(key)
    if hit is not None:
        return hit
    raw = None
    if isinstance(tok.tk.decoder, decoders.ByteLevel):
        piece = tok.tk.id_to_token(token_id) or ""
        byte_of = _unicode_to_byte()
        if piece and all(c in byte_of for c in piece) and token_id not in _specials(tok):
            raw = bytes(byte_of[c] for c in piece)
    if raw is None:
        text = tok.tk.decode([token_id], skip_special_tokens=False)
        raw = text.encode()
    else:
        text = raw.decode("utf-8", errors="replace")
    if len(_texts) > 500_000:  # a bound, not a policy: vocabularies are far smaller
        _texts.clear()
    _texts[key] = (text, raw)
    return text, raw


def _specials(tok: ModelTokenizer) -> set[int]:
    return {i for i, t in tok.tk.get_added_tokens_decoder().items() if getattr(t, "special", False)}


def completion_logprobs(
    tok: ModelTokenizer, ids: list[int], entries: list, *, offset: int = 0
) -> dict:
    """The completions shape for tokens ``ids`` with entries (None: no logprob); offsets
    start at ``offset``."""
    out: dict = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for token_id, entry in zip(ids, entries, strict=True):
        text = token(tok, token_id)[0]
        out["tokens"].append(text)
        out["text_offset"].append(offset)
        offset += len(text)
        if entry is None:
            out["token_logprobs"].append(None)
            out["top_logprobs"].append(None)
            continue
        logprob, alternatives = entry
        top: dict[str, float] = {}
        for i, lp in alternatives:  # most likely first: a text two tokens share keeps the max
            top.setdefault(token(tok, i)[0], lp)
        top.setdefault(text, logprob)  # the sampled token is always there
        out["token_logprobs"].append(logprob)
        out["top_logprobs"].append(top)
    return out


def chat_logprobs(tok: ModelTokenizer, ids: list[int], entries: list) -> list[dict]:
    """The chat shape's ``content`` list for tokens ``ids``."""
    out = []
    for token_id, entry in zip(ids, entries, strict=True):
        logprob, alternatives = entry if entry is not None else (None, [])
        text, raw = token(tok, token_id)
        top = []
        for i, lp in alternatives:
            t, b = token(tok, i)
            top.append({"token": t, "logprob": lp, "bytes": list(b)})
        out.append({"token": text, "logprob": logprob, "bytes": list(raw), "top_logprobs": top})
    return out
