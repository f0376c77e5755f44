"""The clients of ``bench_serving``: N concurrent HTTP clients, each posting its prompts to
/v1/completions with `stream` (api "openai"), or to /api/v1/generations and reading the
tokens back from .../stream (api "rest"), with the latency figures a run reports."""

from __future__ import annotations

import asyncio
import json
import time
import uuid


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def steady_rate(records: list[dict], t0: float, first_end: float) -> float | None:
    """Tokens/s while every client was in flight: from the start to the moment the first
    client had its last answer. Equal requests started together end together, so a run's
    tail -- the slowest clients finishing alone, fewer streams than asked for -- weighs on
    its wall-clock rate by chance (more the larger k: acceptance lengths vary); a client
    restarting between its requests is inside the window, as in steady traffic."""
    span = first_end - t0
    if span <= 0:
        return None
    return sum(n for r in records for at, n in r.get("arrivals", ()) if at <= first_end) / span


async def _client(
    http, base, key, prompts, max_tokens, records, ends, api="rest", params=None
) -> None:
    """POST each prompt, then follow its SSE stream to the end, timing every token event
    (api "openai": one streaming POST /v1/completions per prompt)."""
    headers = {"Authorization": f"Bearer {key}"}
    try:
        if api == "openai":
            for prompt in prompts:
                records.append(await _openai_one(http, base, headers, prompt, max_tokens, params))
            return
        await _rest_client(http, base, headers, prompts, max_tokens, records, params)
    finally:
        ends.append(time.perf_counter())


async def _rest_client(http, base, headers, prompts, max_tokens, records, params) -> None:
    for prompt in prompts:
        t0 = time.perf_counter()
        r = await http.post(
            f"{base}/api/v1/generations",
            headers=headers,
            json={
                "pipeline": "bench",
                "prompt": prompt,
                "max_tokens": max_tokens,
                "temperature": 0,
                **(params or {}),
            },
        )
        if r.status_code != 201:
            raise RuntimeError(f"POST /api/v1/generations: {r.status_code} {r.text[:500]}")
        gid = r.json()["id"]
        rec = {"id": gid, "tokens": 0, "itl": [], "ttft": None, "finish": None, "arrivals": []}
        rec["submit"] = time.perf_counter() - t0
        last = None
        t1 = time.perf_counter()
        async with http.stream(
            "GET", f"{base}/api/v1/generations/{gid}/stream", headers=headers
        ) as s:
            rec["open"] = time.perf_counter() - t1
            async for line in s.aiter_lines():
                if not line.startswith("data: "):
                    continue
                event = json.loads(line[6:])
                now = time.perf_counter()
                if event["type"] == "tokens":
                    n = len(event["tokens"])
                    rec["arrivals"].append((now, n))
                    if last is None:
                        rec["ttft"] = now - t0
                    else:
                        rec["itl"].extend([(now - last) / n] * n)
                    last = now
                    rec["tokens"] += n
                elif event["type"] in ("done", "error"):
                    rec["finish"] = event.get("finish_reason") or event.get("error")
                    break
        records.append(rec)


async def _openai_one(http, base, headers, prompt, max_tokens, params=None) -> dict:
    """One streaming POST /v1/completions. Its tokens are the usage's completion_tokens
    (`stream_options.include_usage`); a chunk carries a verifier round's tokens, so for the
    ITL each chunk's gap is split over its share of the tokens (by its text's length)."""
    body = {
        "model": "bench",
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        **(params or {}),
    }
    rec: dict = {"id": None, "tokens": 0, "itl": [], "ttft": None, "finish": None}
    t0 = time.perf_counter()
    chunks: list[tuple[float, int]] = []  # (arrival, characters)
    async with http.stream("POST", f"{base}/v1/completions", headers=headers, json=body) as s:
        if s.status_code != 200:
            raise RuntimeError(f"POST /v1/completions: {s.status_code} {await s.aread()!r}")
        async for line in s.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            now = time.perf_counter()
            rec["id"] = str(uuid.UUID(event["id"].removeprefix("cmpl-")))
            if event.get("usage"):
                rec["tokens"] = event["usage"]["completion_tokens"]
            for choice in event.get("choices", []):
                if choice.get("text"):
                    rec["ttft"] = rec["ttft"] or now - t0
                    chunks.append((now, len(choice["text"])))
                if choice.get("finish_reason"):
                    rec["finish"] = choice["finish_reason"]
    chars = sum(c for _, c in chunks)
    for (before, _), (after, c) in zip(chunks, chunks[1:], strict=False):
        n = max(1, round(rec["tokens"] * c / chars)) if chars else 1
        rec["itl"].extend([(after - before) / n] * n)
    rec["arrivals"] = [(at, rec["tokens"] * c / chars) for at, c in chunks] if chars else []
    return rec


def drive(
    *,
    base: str,
    key: str,
    prompts_per_client: list[list[str]],
    max_tokens: int,
    api: str = "rest",
    params: dict | None = None,
) -> dict:
    """Every client sends its prompts one after another, all clients at once; tokens/s,
    inter-token latency (the gap between token events split over their tokens) and TTFT.
    `params`: sampling parameters over the default greedy ones."""
    import httpx

    records: list[dict] = []
    ends: list[float] = []  # when each client had its last answer

    async def main():
        limits = httpx.Limits(max_connections=len(prompts_per_client) * 2 + 4)
        async with httpx.AsyncClient(timeout=600, limits=limits) as http:
            await asyncio.gather(
                *(
                    _client(http, base, key, ps, max_tokens, records, ends, api, params)
                    for ps in prompts_per_client
                )
            )

    t0 = time.perf_counter()
    asyncio.run(main())
    wall = time.perf_counter() - t0
    tokens = sum(r["tokens"] for r in records)
    itl = [x for r in records for x in r["itl"]]
    ttft = [r["ttft"] for r in records if r["ttft"] is not None]
    submit = [r["submit"] for r in records if r.get("submit") is not None]
    opened = [r["open"] for r in records if r.get("open") is not None]
    errors = [r["finish"] for r in records if r["finish"] not in ("stop", "length")]
    return {
        "requests": len(records),
        "tokens": tokens,
        "wall_s": wall,
        "tokens_per_s": tokens / wall,
        "steady_tokens_per_s": steady_rate(records, t0, min(ends, default=t0)),
        "itl_ms_p50": (percentile(itl, 0.5) or 0) * 1000,
        "itl_ms_p99": (percentile(itl, 0.99) or 0) * 1000,
        "ttft_ms_p50": (percentile(ttft, 0.5) or 0) * 1000,
        "ttft_ms_p99": (percentile(ttft, 0.99) or 0) * 1000,
        "submit_ms_p50": (percentile(submit, 0.5) or 0) * 1000,
        "submit_ms_p99": (percentile(submit, 0.99) or 0) * 1000,
        "stream_open_ms_p50": (percentile(opened, 0.5) or 0) * 1000,
        "errors": errors[:5],
        "ids": [r["id"] for r in records],
    }
