"""Check the planner against the real engine (`manage.py bench_planner`).

1. Sweep: for each batch size B and k, one in-process SpeculativeGenerator run of the real
   engine (inference.engine, greedy, B prompts x N new tokens), wall-clock timed; every
   draft call, verify call and prefill is timed too (the engine objects are wrapped, not
   changed), and every verify result gives per-position acceptance.
2. Fit: the planner's step-time curves from those timings, by least squares
   (`fleet.planner.model.fit_linear`): draft step t(b), verify step t(tokens scored),
   per-round overhead t(b) and prefill t(B).
3. Predict with the planner (`predict_run`: the fitted curves, the pooled per-position
   acceptance, lockstep batches that shrink as sequences finish) and compare with the
   measured goodput; the planner's chosen k per batch size against the best k of the sweep.

Torch is imported inside the functions: this module is only used by the command.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from fleet.planner.batch_runs import predict_run, predict_run_trace
from fleet.planner.model import Curve, PipelineModel, fit_linear, fit_linear2

from .prompts import stdlib_prompts

BATCHES = (1, 4, 16)
KS = tuple(range(7))


@dataclass
class Timings:
    prefill: list[tuple[int, float]] = field(default_factory=list)  # (batch, s)
    draft: list[tuple[int, int, float]] = field(default_factory=list)  # (batch, k, s)
    verify: list[tuple[int, int, float]] = field(default_factory=list)  # (batch, tokens, s)
    accepted: list[tuple[int, int]] = field(default_factory=list)  # (draft len, n accepted)
    # greedy acceptance traces per prompt (see greedy_traces), when measured
    traces: list[list[bool]] = field(default_factory=list)

    def clear(self) -> None:
        for name in ("prefill", "draft", "verify", "accepted"):
            getattr(self, name).clear()


@dataclass
class RunResult:
    batch: int
    k: int
    wall_s: float
    tokens: int
    prefill_s: float
    draft_s: float
    verify_s: float
    rounds: int
    mean_batch: float
    timings: Timings = field(default_factory=Timings, repr=False)
    outputs: list[list[int]] = field(default_factory=list, repr=False)

    @property
    def mean_tokens(self) -> float:
        """Tokens scored per verify step."""
        v = self.timings.verify
        return statistics.fmean(n for _, n, _ in v) if v else self.batch

    @property
    def goodput(self) -> float:
        return self.tokens / self.wall_s

    @property
    def overhead_per_round(self) -> float:
        if not self.rounds:
            return 0.0
        return max(self.wall_s - self.prefill_s - self.draft_s - self.verify_s, 0.0) / self.rounds


CLOCKS = {"cpu": time.thread_time, "wall": time.perf_counter}


def _instrument(verify, draft, t: Timings, clock=time.perf_counter) -> None:
    """Time the engine calls the generator makes (instance attributes shadow the methods)."""
    add_many, verify_fn = verify.add_many, verify.verify

    def timed_add_many(items):
        t0 = clock()
        out = add_many(items)
        t.prefill.append((len(items), clock() - t0))
        return out

    def timed_verify(items):
        t0 = clock()
        out = verify_fn(items)
        dt = clock() - t0
        t.verify.append((len(items), sum(len(tokens) + 1 for _, tokens, _ in items), dt))
        for (_, tokens, _), r in zip(items, out, strict=True):
            if tokens:
                t.accepted.append((len(tokens), r.n_accepted))
        return out

    verify.add_many, verify.verify = timed_add_many, timed_verify
    if draft is not None:
        propose = draft.propose

        def timed_propose(requests):
            t0 = clock()
            out = propose(requests)
            t.draft.append((len(requests), max(k for _, k in requests), clock() - t0))
            return out

        draft.propose = timed_propose


def load_pair(
    models_dir: Path, *, threads: int | None = None, max_len: int = 512, n_slots: int = 16
):
    import torch

    from inference.engine.checkpoints import load_checkpoint
    from inference.engine.engines import DraftEngine, VerifyEngine

    if threads:
        torch.set_num_threads(threads)
    target, tok = load_checkpoint(models_dir / "demo-target")
    draft_model, _ = load_checkpoint(models_dir / "demo-draft")
    max_len = min(
        max_len, target.config.max_position_embeddings, draft_model.config.max_position_embeddings
    )
    verify = VerifyEngine(target, tok, n_slots=n_slots, max_len=max_len)
    draft = DraftEngine.from_model(draft_model, tok, n_slots=n_slots, max_len=max_len)
    return verify, draft, tok, max_len


def run_sweep(
    models_dir: Path,
    *,
    batches=BATCHES,
    ks=KS,
    new_tokens: int = 48,
    prompt_len: int = 32,
    reps: int = 2,
    threads: int | None = None,
    clock: str = "cpu",
    log: Callable[[str], None] = print,
) -> tuple[list[RunResult], Timings]:
    """`clock` "cpu": seconds of CPU time of the engine thread (torch runs on it with
    threads=1), steady on a shared machine and equal to wall time on an idle one; "wall":
    wall-clock seconds."""
    now = CLOCKS[clock]
    from inference.engine.generator import SpeculativeGenerator
    from inference.engine.sampling import SamplingParams

    verify, draft, _, max_len = load_pair(
        models_dir,
        threads=threads,
        max_len=prompt_len + new_tokens + max(ks) + 8,
        n_slots=max(batches),
    )
    if prompt_len + new_tokens + max(ks) + 2 > max_len:
        raise ValueError(
            f"prompt {prompt_len} + {new_tokens} new tokens "
            f"does not fit the models' {max_len} positions"
        )
    timings, all_t = Timings(), Timings()
    _instrument(verify, draft, timings, now)
    prompts = stdlib_prompts(max(batches), prompt_len, seed=7)
    params = SamplingParams(temperature=0.0, max_tokens=new_tokens, ignore_eos=True)
    results: list[RunResult] = []
    # warm-up (allocator, caches, threads)
    SpeculativeGenerator(verify, draft, k=2).generate(
        prompts[:2], SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
    )
    for rep in range(reps):
        for b in batches:
            for k in ks:
                timings.clear()
                batch = prompts[:b]  # the same workload every repetition: reps differ by noise only
                gen = SpeculativeGenerator(verify, draft if k > 0 else None, k=k)
                t0 = now()
                outs = gen.generate(batch, params)
                wall = now() - t0
                tokens = sum(len(o.token_ids) for o in outs)
                rounds = len(timings.verify)
                results.append(
                    RunResult(
                        batch=b,
                        k=k,
                        wall_s=wall,
                        tokens=tokens,
                        prefill_s=sum(s for _, s in timings.prefill),
                        draft_s=sum(s for *_, s in timings.draft),
                        verify_s=sum(s for *_, s in timings.verify),
                        rounds=rounds,
                        mean_batch=statistics.fmean(n for n, _, _ in timings.verify)
                        if rounds
                        else b,
                        timings=Timings(
                            *(
                                list(getattr(timings, n))
                                for n in ("prefill", "draft", "verify", "accepted")
                            )
                        ),
                        outputs=[list(o.token_ids) for o in outs],
                    )
                )
                all_t.accepted.extend(timings.accepted)
            done = ", ".join(f"k={r.k} {r.goodput:.0f}" for r in results[-len(ks) :])
            log(f"  rep {rep + 1}/{reps} batch {b}: {done} tok/s")
    plain = [r for r in results if r.k == 0 and r.batch == max(batches)]
    if plain and draft is not None:
        all_t.traces = greedy_traces(draft_model_of(draft), prompts, plain[0].outputs)
    return results, all_t


def draft_model_of(draft):
    return getattr(draft.drafter, "model", None)


def greedy_traces(model, prompts: list[list[int]], outputs: list[list[int]]) -> list[list[bool]]:
    """For each prompt: does the draft model's greedy token at output position j, given the
    prompt and the target's output before j, equal the target's token j? (Teacher forcing:
    exactly what greedy speculative decoding checks, whatever k is.)"""
    import torch

    if model is None:
        return []
    traces = []
    with torch.no_grad():
        for prompt, out in zip(prompts, outputs, strict=False):
            seq = torch.tensor([prompt + out])
            pred = model(seq)[0].argmax(-1).tolist()
            p = len(prompt)
            traces.append([pred[p + j - 1] == out[j] for j in range(len(out))])
    return traces


def per_position_acceptance(accepted: list[tuple[int, int]], k_max: int) -> list[float]:
    """Cumulative acceptance per position: P(the first i+1 drafts all accepted), estimated
    over the drafts long enough to have position i."""
    out: list[float] = []
    for i in range(k_max):
        reach = [(d, a) for d, a in accepted if d > i]
        out.append(
            sum(1 for d, a in reach if a > i) / len(reach) if reach else (out[-1] if out else 0.0)
        )
    for i in range(1, len(out)):
        out[i] = min(out[i], out[i - 1])
    return out


def best_runs(results: list[RunResult]) -> list[RunResult]:
    """The fastest repetition of each (batch, k): the one least disturbed by other load."""
    best: dict[tuple[int, int], RunResult] = {}
    for r in results:
        key = (r.batch, r.k)
        if key not in best or r.wall_s < best[key].wall_s:
            best[key] = r
    return list(best.values())


def _means(points: list[tuple[float, float]]) -> list[tuple[float, float, float]]:
    """(x, mean y, count) per distinct x: the same least-squares fit as over every point."""
    groups: dict[float, list[float]] = {}
    for x, y in points:
        groups.setdefault(x, []).append(y)
    return [(x, statistics.fmean(ys), len(ys)) for x, ys in sorted(groups.items())]


def _means2(points: list[tuple[float, float, float]]) -> list[tuple[float, float, float, float]]:
    groups: dict[tuple[float, float], list[float]] = {}
    for n, b, y in points:
        groups.setdefault((n, b), []).append(y)
    return [(n, b, statistics.fmean(ys), len(ys)) for (n, b), ys in sorted(groups.items())]


def fit_model(
    results: list[RunResult], t: Timings, k_max: int
) -> tuple[PipelineModel, Curve, dict]:
    """Fit the planner's curves to the timings of the best run of each (batch, k)."""
    runs = best_runs(results)
    draft = fit_linear(_means([(b, s / k) for r in runs for b, k, s in r.timings.draft if k > 0]))
    # plain decoding steps (one token per sequence) and verify steps (a draft to score) run
    # different code paths in the engine: fitted apart
    verify = fit_linear2(
        _means2([(n, b, s) for r in runs for b, n, s in r.timings.verify if n > b])
    )
    plain = fit_linear(_means([(b, s) for r in runs for b, n, s in r.timings.verify if n <= b]))
    overhead = fit_linear2(
        [(r.mean_tokens, r.mean_batch, r.overhead_per_round) for r in runs if r.rounds]
    )
    prefill = fit_linear(_means([(b, s) for r in runs for b, s in r.timings.prefill]))
    per_pos = per_position_acceptance(t.accepted, k_max)
    m = PipelineModel(
        alpha=None,
        per_position=tuple(per_pos),
        verify_curve=verify,
        plain_curve=plain,
        draft_curve=draft,
        overhead_curve=overhead,
        n_verifiers=1,
        n_drafters=1,
    )
    fits = {
        "draft_step_s": {"a": draft.a, "per_seq": draft.x},
        "verify_step_s": {"a": verify.a, "per_token": verify.x, "per_seq": verify.y},
        "plain_step_s": {"a": plain.a, "per_seq": plain.x},
        "overhead_per_round_s": {"a": overhead.a, "per_token": overhead.x, "per_seq": overhead.y},
        "prefill_s": {"a": prefill.a, "per_seq": prefill.x},
        "per_position_acceptance": [round(p, 4) for p in per_pos],
    }
    return m, prefill, fits


def compare(
    results: list[RunResult],
    m: PipelineModel,
    prefill: Curve,
    *,
    new_tokens: int,
    batches=BATCHES,
    ks=KS,
    traces: list[list[bool]] | None = None,
) -> dict:
    """Measured vs predicted goodput. Acceptance input: the greedy traces when given (exact
    for greedy decoding), else the per-position rates of each workload; the per-position
    prediction is reported beside the trace one either way."""
    measured = {(r.batch, r.k): r.goodput for r in best_runs(results)}
    rows, errors, ratios, pp_errors, rounds_checked = [], [], [], [], []
    use_traces = traces is not None and len(traces) >= max(batches)
    for b in batches:
        # acceptance of this workload (these b prompts), measured over its runs of every k
        accepted = [a for r in results if r.batch == b for a in r.timings.accepted]
        mb = m.with_(per_position=tuple(per_position_acceptance(accepted, max(max(ks), 1))))
        per_pos = {
            k: predict_run(mb, k=k, batch=b, new_tokens=new_tokens, prefill_s=prefill(b))[
                "goodput_tps"
            ]
            for k in ks
        }
        if use_traces:
            assert traces is not None
            runs = {
                k: predict_run_trace(mb, k=k, traces=traces[:b], prefill_s=prefill(b)) for k in ks
            }
            preds = {k: r["goodput_tps"] for k, r in runs.items()}
            rounds_checked += [
                r.rounds == runs[r.k]["rounds"] for r in results if r.batch == b and r.k in runs
            ]
        else:
            preds = per_pos
        pp_errors += [abs(per_pos[k] - measured[(b, k)]) / measured[(b, k)] for k in ks]
        chosen = max(preds, key=lambda k: (preds[k], -k))
        best = max(ks, key=lambda k: measured[(b, k)])
        ratios.append(measured[(b, chosen)] / measured[(b, best)])
        for k in ks:
            err = abs(preds[k] - measured[(b, k)]) / measured[(b, k)]
            errors.append(err)
            rows.append(
                {
                    "batch": b,
                    "k": k,
                    "measured_tps": round(measured[(b, k)], 2),
                    "predicted_tps": round(preds[k], 2),
                    "predicted_tps_per_position": round(per_pos[k], 2),
                    "error": round(err, 4),
                    "chosen": k == chosen,
                    "best": k == best,
                }
            )
    return {
        "rows": rows,
        "acceptance_input": "greedy trace" if use_traces else "per-position rates",
        # sanity check of the trace: runs whose verify rounds it reproduces exactly
        "trace_rounds_exact": f"{sum(rounds_checked)}/{len(rounds_checked)}"
        if rounds_checked
        else None,
        "max_prediction_error": round(max(errors), 4),
        "max_prediction_error_per_position": round(max(pp_errors), 4),
        "mean_prediction_error": round(statistics.fmean(errors), 4),
        "chosen_vs_best_goodput": round(min(ratios), 4),
        "chosen_k": {
            str(b): next(r["k"] for r in rows if r["batch"] == b and r["chosen"]) for b in batches
        },
        "best_k": {
            str(b): next(r["k"] for r in rows if r["batch"] == b and r["best"]) for b in batches
        },
    }


def format_rows(report: dict) -> str:
    lines = [f"{'batch':>5} {'k':>2} {'measured tok/s':>15} {'predicted tok/s':>16} {'error':>7}"]
    for r in report["rows"]:
        mark = (" <- planner" if r["chosen"] else "") + (" (best measured)" if r["best"] else "")
        lines.append(
            f"{r['batch']:>5} {r['k']:>2} {r['measured_tps']:>15.1f} {r['predicted_tps']:>16.1f} "
            f"{r['error']:>6.1%}{mark}"
        )
    lines.append(
        f"acceptance input: {report['acceptance_input']}"
        + (
            f", reproducing {report['trace_rounds_exact']} runs' rounds exactly"
            if report.get("trace_rounds_exact")
            else ""
        )
        + f" (per-position rates instead: max "
        f"error {report['max_prediction_error_per_position']:.1%})\n"
        f"max prediction error {report['max_prediction_error']:.1%} (target <= 15%), "
        f"mean {report['mean_prediction_error']:.1%}; planner's k vs best k: "
        f"{report['chosen_vs_best_goodput']:.1%} of the best goodput (target >= 95%)"
    )
    return "\n".join(lines)
