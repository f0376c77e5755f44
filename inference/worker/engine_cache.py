"""Model references -> loaded engines, once per worker process. Imports torch."""

from __future__ import annotations

from fleet.env import env_float, env_int, env_str
from fleet.pipelines.model_refs import model_dir


def torch_device() -> str:
    """Where the engine computes: TANDEM_TORCH_DEVICE (e.g. cuda, cuda:1), default cpu."""
    return env_str("TANDEM_TORCH_DEVICE", "cpu") or "cpu"


def n_slots() -> int:
    """The most sequences a node's engine holds at once (the KV budget may allow fewer)."""
    return env_int("TANDEM_NODE_SLOTS", 64, minimum=1)


# tokens of prompt + output a sequence may reach when nothing says otherwise: a model's
# max_position_embeddings (131,072 for Llama 3) would make one KV slot gigabytes
DEFAULT_CONTEXT = 4096  # = inference.engine.kv_cache.DEFAULT_MAX_LEN (this module skips torch)


def context() -> int:
    """A node's context (prompt + output tokens, the KV cache's max_len): TANDEM_NODE_MAX_LEN,
    default DEFAULT_CONTEXT, capped by the model's max_position_embeddings."""
    return env_int("TANDEM_NODE_MAX_LEN", DEFAULT_CONTEXT, minimum=1)


def kv_budget() -> dict:
    """The KV cache's memory budget: TANDEM_KV_BYTES (bytes), or TANDEM_KV_MEMORY_FRACTION of
    the device's free memory after the weights are loaded (default 0.9 on a GPU, like vLLM's
    gpu_memory_utilization; 0.25 of available RAM on a CPU host)."""
    return {
        "budget_bytes": env_int("TANDEM_KV_BYTES", None, minimum=1),
        "memory_fraction": env_float("TANDEM_KV_MEMORY_FRACTION", None, minimum=0, maximum=1),
    }


def cache_shape(model) -> dict:
    """n_slots and max_len for an engine holding ``model``, from the node's budget."""
    from inference.engine.memory import plan_kv

    p = next(model.parameters())
    plan = plan_kv(
        model.config, p.dtype, p.device, context=context(), max_slots=n_slots(), **kv_budget()
    )
    return {"n_slots": plan.n_slots, "max_len": plan.max_len}


def load_verify_engine(ref: str):
    import torch

    from inference.engine.checkpoints import load_checkpoint
    from inference.engine.engines import VerifyEngine

    torch.set_grad_enabled(False)
    model, tokenizer = load_checkpoint(model_dir(ref), device=torch_device())
    return VerifyEngine(model, tokenizer, **cache_shape(model))


def load_draft_engine(kind: str, ref: str):
    from inference.engine.engines import DraftEngine

    if kind == "ngram":
        return DraftEngine.ngram()
    import torch

    from inference.engine.checkpoints import load_checkpoint

    torch.set_grad_enabled(False)
    model, tokenizer = load_checkpoint(model_dir(ref), device=torch_device())
    return DraftEngine.from_model(model, tokenizer, **cache_shape(model))


def sampling_params(params: dict, *, already: int = 0):
    """Generation.params -> SamplingParams; `already` tokens were emitted by an earlier
    attempt (a resumed generation only has the rest of max_tokens left)."""
    from inference.engine.sampling import SamplingParams

    return SamplingParams(
        temperature=float(params.get("temperature", 1.0)),
        top_k=int(params.get("top_k") or 0),
        top_p=float(params.get("top_p", 1.0)),
        seed=params.get("seed"),
        max_tokens=max(0, int(params.get("max_tokens", 16)) - already),
        stop=list(params.get("stop") or []),
        ignore_eos=bool(params.get("ignore_eos", False)),
        logprobs=params.get("logprobs"),
        prompt_logprobs=params.get("prompt_logprobs"),
    )
