"""Turning a client's request into what `generation_submit` takes, for both HTTP APIs.

One set of rules for the REST API and the OpenAI-compatible API: which pipeline a model name
means, the sampling parameters' ranges, and whether the prompt fits the model's context.
Errors are `RequestError`s naming the offending parameter; each API renders them in its own
shape (DRF field errors, OpenAI error objects).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from fleet.pipelines.models import Pipeline
from fleet.raw_models import raw_instances
from inference.serving import tokenization

log = logging.getLogger(__name__)

TEMPERATURE_MAX = 2.0
MAX_STOP_SEQUENCES = 4
MAX_STOP_LENGTH = 200
SEED_MAX = 2**63 - 1


class RequestError(Exception):
    def __init__(self, message: str, *, param: str | None = None, code: str = "invalid_value"):
        super().__init__(message)
        self.message, self.param, self.code = message, param, code


class ModelNotFound(RequestError):
    def __init__(self, name: str):
        super().__init__(
            f"The model '{name}' does not exist or you do not have access to it.",
            param="model",
            code="model_not_found",
        )


@dataclass(frozen=True)
class Prepared:
    pipeline: Pipeline
    prompt: str
    prompt_tokens: list[int]
    params: dict


def servable_pipelines():
    """Pipelines a client may send requests to (simulated ones have no real workers)."""
    return Pipeline.objects.filter(simulated=False).order_by("name")


def pipeline_named(name) -> Pipeline:
    """The servable pipeline of that name. Raw SQL: on the path of every request, and the ORM
    spent more CPU compiling this query than the database spent running it."""
    if not isinstance(name, str) or not name:
        raise RequestError("'model' must be a non-empty string.", param="model")
    table = Pipeline._meta.db_table
    found = raw_instances(
        Pipeline, f"SELECT * FROM {table} WHERE name = %s AND simulated = %s", [name, False]
    )
    if not found:
        raise ModelNotFound(name)
    return found[0]


def tokenizer_for(pipeline: Pipeline) -> tokenization.ModelTokenizer:
    try:
        return tokenization.load(pipeline.target_model)
    except tokenization.TokenizerUnavailable as exc:
        # The cause names server paths: for the operator's log, not for the client.
        log.warning("pipeline %s: tokenizer not loadable: %s", pipeline.name, exc)
        raise RequestError(
            f"The model '{pipeline.name}' is not available on this server: its model files "
            "are missing or unreadable (see the server log).",
            param="model",
            code="model_not_available",
        ) from exc


def stop_list(stop) -> list[str]:
    """`stop` as a list: None, one string, or up to four non-empty strings."""
    if stop is None:
        return []
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise RequestError("'stop' must be a string or a list of strings.", param="stop")
    if len(stop) > MAX_STOP_SEQUENCES:
        raise RequestError(f"'stop' may hold at most {MAX_STOP_SEQUENCES} sequences.", param="stop")
    if any("\x00" in s for s in stop):
        raise RequestError("Stop sequences may not contain NUL characters.", param="stop")
    if any(not s or len(s) > MAX_STOP_LENGTH for s in stop):
        raise RequestError(
            f"Each stop sequence must be 1..{MAX_STOP_LENGTH} characters.", param="stop"
        )
    return stop


def _number(value, param: str, *, integer: bool = False):
    if isinstance(value, bool) or not isinstance(value, int | float):
        kind = "an integer" if integer else "a number"
        raise RequestError(f"'{param}' must be {kind}.", param=param)
    if integer and isinstance(value, float):
        if not value.is_integer():
            raise RequestError(f"'{param}' must be an integer.", param=param)
        value = int(value)
    return value


def sampling_params(
    *, temperature=None, top_p=None, top_k=None, seed=None, stop=None, ignore_eos=None
) -> dict:
    """Validated sampling parameters with defaults (temperature 1, top_p 1, top_k 0 = off).
    `ignore_eos` (vLLM's extension, which `vllm bench serve` sends): generate max_tokens
    whatever the model's end-of-sequence says; kept in the parameters only when true."""
    params: dict = {}
    if ignore_eos is not None and not isinstance(ignore_eos, bool):
        raise RequestError("'ignore_eos' must be a boolean.", param="ignore_eos")
    if ignore_eos:
        params["ignore_eos"] = True
    temperature = 1.0 if temperature is None else _number(temperature, "temperature")
    if not 0 <= temperature <= TEMPERATURE_MAX:
        raise RequestError(
            f"'temperature' must be between 0 and {TEMPERATURE_MAX:g}.", param="temperature"
        )
    top_p = 1.0 if top_p is None else _number(top_p, "top_p")
    if not 0 < top_p <= 1:
        raise RequestError("'top_p' must be greater than 0 and at most 1.", param="top_p")
    top_k = 0 if top_k is None else _number(top_k, "top_k", integer=True)
    if top_k < 0:
        raise RequestError("'top_k' must be 0 (off) or a positive integer.", param="top_k")
    if seed is not None:
        seed = _number(seed, "seed", integer=True)
        if not 0 <= seed <= SEED_MAX:
            raise RequestError(f"'seed' must be between 0 and {SEED_MAX}.", param="seed")
    params.update(temperature=float(temperature), top_p=float(top_p), top_k=int(top_k), seed=seed)
    params["stop"] = stop_list(stop)
    return params


def prepare(
    *,
    pipeline: Pipeline,
    prompt: str | list[int],
    max_tokens=None,
    default_max_tokens: int | None = None,
    prompt_param: str = "prompt",
    max_tokens_param: str = "max_tokens",
    min_max_tokens: int = 1,
    **sampling,
) -> Prepared:
    """Tokenize the prompt, check it and max_tokens against the context, validate sampling.

    `prompt` is text, or token ids (OpenAI completions accept both). `default_max_tokens`
    None means "the rest of the context". `min_max_tokens` 0: a request that only scores
    its prompt (OpenAI completions with echo).
    """
    params = sampling_params(**sampling)
    tok = tokenizer_for(pipeline)
    context = tok.context_length
    if isinstance(prompt, str):
        text, ids = prompt, tok.encode(prompt)
    else:
        vocab = tok.tk.get_vocab_size(with_added_tokens=True)
        if not all(isinstance(i, int) and not isinstance(i, bool) for i in prompt) or any(
            not 0 <= i < vocab for i in prompt
        ):
            raise RequestError(
                f"Prompt token ids must be integers in [0, {vocab}).", param=prompt_param
            )
        ids, text = list(prompt), tok.decode(prompt)
    if not ids:
        raise RequestError("The prompt must not be empty.", param=prompt_param)
    room = context - len(ids)
    if room < 1:
        raise RequestError(
            f"This model's maximum context length is {context} tokens, however you requested "
            f"{len(ids)} tokens in the prompt, which leaves no room for a completion. "
            "Please reduce the length of the prompt.",
            param=prompt_param,
            code="context_length_exceeded",
        )
    if max_tokens is None:
        max_tokens = room if default_max_tokens is None else min(default_max_tokens, room)
    max_tokens = _number(max_tokens, max_tokens_param, integer=True)
    if max_tokens < min_max_tokens:
        raise RequestError(
            f"'{max_tokens_param}' must be at least {min_max_tokens}"
            + (" (0 only with 'echo')." if min_max_tokens == 1 else "."),
            param=max_tokens_param,
        )
    if max_tokens > room:
        raise RequestError(
            f"This model's maximum context length is {context} tokens. However, you requested "
            f"{len(ids) + max_tokens} tokens ({len(ids)} in the prompt, {max_tokens} for the "
            f"completion). Please reduce the prompt or '{max_tokens_param}' (at most {room}).",
            param=max_tokens_param,
            code="context_length_exceeded",
        )
    params["max_tokens"] = int(max_tokens)
    return Prepared(pipeline=pipeline, prompt=text, prompt_tokens=ids, params=params)
