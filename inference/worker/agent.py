"""A node's agent inside its worker process: reports the real device, heartbeats with
telemetry through the node token over HTTP, publishes the same figures to the telemetry
stream every second, and stops heartbeating when the engine loop stalls (so the control
plane marks the node lost and re-routes its work).

The agent talks to the control plane at TANDEM_API_URL with `Authorization: Bearer tdn_...`;
it never touches the database (a node holds no database credentials). It signs telemetry with
the key the control plane gave the node at boot (and repeats in each heartbeat reply).
"""

from __future__ import annotations

import logging
import os
import platform
import threading
import time
from typing import TYPE_CHECKING

from django.conf import settings

from fleet.env import env_float
from inference.worker.power import PowerMeter

if TYPE_CHECKING:
    import httpx

logger = logging.getLogger(__name__)

AGENT_VERSION = "tandem-agent/1"


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def engine_device(engine) -> str:
    """The torch device an engine computes on ("cpu" for the n-gram drafter)."""
    device = getattr(engine, "device", None) or getattr(
        getattr(engine, "drafter", None), "device", None
    )
    return str(device or "cpu")


def device_info(device: str = "cpu") -> dict:
    """The device this process computes on: the CUDA device's name, or the CPU model."""
    import torch

    info = {"torch": torch.__version__, "host": platform.node(), "pid": os.getpid()}
    if device.startswith("cuda") and torch.cuda.is_available():
        index = torch.device(device).index or 0
        props = torch.cuda.get_device_properties(index)
        info |= {
            "kind": "gpu",
            "device": device,
            "name": torch.cuda.get_device_name(index),
            "memory_gb": round(props.total_memory / 2**30, 1),
        }
    else:
        info |= {
            "kind": "cpu",
            "device": "cpu",
            "name": cpu_model(),
            "cores": os.cpu_count(),
            "threads": torch.get_num_threads(),
        }
    return info


class _Deltas:
    """Per-interval deltas of cumulative counters (the telemetry contract)."""

    def __init__(self):
        self.last: dict = {}

    def __call__(self, key: str, value):
        prev = self.last.get(key)
        self.last[key] = value
        if isinstance(value, dict):
            prev = prev or {}
            return {k: v - prev.get(k, 0) for k, v in value.items() if v - prev.get(k, 0) > 0}
        if isinstance(value, list):
            prev = prev or []
            return [v - (prev[i] if i < len(prev) else 0) for i, v in enumerate(value)]
        return value - (prev or 0)


GAUGES = (
    "ts",
    "role",
    "pipeline",
    "queue_depth",
    "num_requests_running",
    "kv_slots_used",
    "kv_slots_total",
    "power_source",
)
MEANS = ("power_w", "utilization", "verify_step_s", "draft_step_s")


def accumulate(samples: list[dict]) -> dict:
    """Several consecutive interval samples as one interval: counts add up, gauges take the
    last value, power/utilization/step times are interval-weighted means."""
    if len(samples) == 1:
        return dict(samples[0])
    total = sum(s["interval_s"] for s in samples) or 1e-3
    out: dict = {"interval_s": total}
    for s in samples:
        for key, value in s.items():
            if key == "interval_s":
                continue
            if key in GAUGES:
                out[key] = value
            elif key in ("itl_s", "ttft_s"):  # raw latency samples: all of them
                out.setdefault(key, []).extend(value)
            elif key in MEANS:
                out[key] = out.get(key, 0.0) + value * s["interval_s"] / total
            elif isinstance(value, dict):
                acc = out.setdefault(key, {})
                for k, v in value.items():
                    acc[k] = acc.get(k, 0) + v
            elif isinstance(value, list):
                acc = out.setdefault(key, [])
                acc.extend([0] * (len(value) - len(acc)))
                for i, v in enumerate(value):
                    acc[i] += v
            else:
                out[key] = out.get(key, 0) + value
    return out


class Agent:
    def __init__(
        self,
        *,
        node_id: int,
        profile: dict,
        loop,
        token: str,
        api_url: str,
        key: str | None = None,
        period_s: float | None = None,
    ):
        self.node_id, self.loop, self.token = node_id, loop, token
        self.api_url = api_url.rstrip("/")
        self.key = key
        self.period_s = float(period_s or settings.HEARTBEAT_PERIOD_S)
        self.device = device_info(engine_device(loop.engine))
        self.power = PowerMeter(
            idle_w=float(profile["idle_w"]),
            tdp_w=float(profile["tdp_w"]),
            gpu=self.device.get("kind") == "gpu",
            gpu_index=int(self.device.get("device", "cuda:0").partition(":")[2] or 0),
        )
        self.deltas = _Deltas()
        # engine loop silent this long: stop heartbeating (the node is then lost, re-routed)
        self.stall_s = env_float("TANDEM_STALL_S", 30.0, minimum=0.1)
        self.last_busy, self.last_t = 0.0, time.monotonic()
        self.stopping = threading.Event()
        self.last_reply: dict | None = None
        self._publish_warned = False
        # one client for the process: a new one per beat costs a TLS context
        self._http: httpx.Client | None = None

    # -- figures ----------------------------------------------------------------------------------
    def sample(self) -> dict:
        """One interval's telemetry (deltas), in the telemetry stream's schema."""
        now = time.monotonic()
        interval = max(now - self.last_t, 1e-3)
        stats = self.loop.stats.snapshot()
        busy = stats["busy_s"] - self.last_busy
        self.last_busy, self.last_t = stats["busy_s"], now
        utilization = min(max(busy / interval, 0.0), 1.0)
        power = self.power.read(utilization)
        counters = self.loop.engine.counters
        if not self.loop.prepared.is_set():  # the start-up sweep runs on the engine: not work
            counters = type(counters)()
        slots = self.loop.slots()
        d = self.deltas
        role = self.loop.role
        steps_hist = d("hist", {k: v for k, v in stats["batch_size_hist"].items()})
        sample = {
            "ts": time.time(),
            "interval_s": interval,
            "role": role,
            "pipeline": self.loop.pipeline_id,
            "queue_depth": self.loop.inbox.qsize(),
            "num_requests_running": len(slots.get("seqs", [])),
            "kv_slots_used": slots.get("slots_used") or 0,
            "kv_slots_total": slots.get("n_slots") or 0,
            "power_w": power.watts,
            "power_source": power.source,
            "utilization": utilization,
        }
        if role == "verify":
            itl_s, ttft_s = self.loop.stats.take_latencies()
            if itl_s:
                sample["itl_s"] = itl_s
            if ttft_s:
                sample["ttft_s"] = ttft_s
            n_steps = sum(steps_hist.values())
            sample |= {
                "num_drafts": d("num_drafts", counters.num_drafts),
                "num_draft_tokens": d("num_draft_tokens", counters.num_draft_tokens),
                "num_accepted_tokens": d("num_accepted", counters.num_accepted_tokens),
                "num_accepted_tokens_per_pos": d(
                    "per_pos", list(counters.num_accepted_tokens_per_pos)
                )[:32],
                # which positions existed this interval: after k is lowered the lists keep
                # their old width, the positions beyond k with 0 drafts (not 0 accepted)
                "num_draft_tokens_per_pos": d(
                    "draft_per_pos", list(counters.num_draft_tokens_per_pos)
                )[:32],
                "generation_tokens": d("emitted", counters.num_emitted_tokens),
                "requests_finished": d("finished", stats["finished"]),
                "degraded_sequences": d("degraded", stats["degraded"]),
                "verify_batch_hist": steps_hist,
                "verify_step_s": (busy / n_steps) if n_steps else 0.0,
            }
        else:
            n_steps = d("draft_steps", counters.num_draft_steps)
            sample |= {
                "draft_steps": n_steps,
                "draft_step_s": (busy / n_steps) if n_steps else 0.0,
                "k_hist": d("k_hist", stats["k_rounds"]),  # the k chosen, by batch size
            }
        return sample

    def heartbeat_body(self, samples: list[dict]) -> dict:
        """Liveness only (the agent, its device). The figures of `samples` leave the node
        once, as the signed telemetry samples `publish` sends: one vocabulary."""
        return {"agent_version": AGENT_VERSION, "device_info": self.device}

    # -- transport --------------------------------------------------------------------------------
    def send_heartbeat(self, body: dict) -> None:
        if self._http is None:
            import httpx

            from inference.worker.control_api import api_headers

            self._http = httpx.Client(timeout=10, headers=api_headers(self.token))
        r = self._http.post(f"{self.api_url}/api/v1/nodes/{self.node_id}/heartbeat", json=body)
        r.raise_for_status()
        self.last_reply = r.json()

    def telemetry_key(self) -> str | None:
        """The key its samples are signed with: the latest heartbeat reply's, else the one
        the control plane gave at boot (None: nothing to sign with yet)."""
        return (self.last_reply or {}).get("telemetry_key") or self.key

    def publish(self, sample: dict) -> None:
        from fleet.telemetry.ingest import publish_sample

        try:
            key = self.telemetry_key()
            if key is None:  # no heartbeat reply yet: nothing to sign with
                return
            publish_sample(self.node_id, sample, key=key)
        except Exception as exc:  # the telemetry stream must never stop heartbeats
            if not self._publish_warned:
                self._publish_warned = True
                logger.warning("node %s: telemetry publish failed: %r", self.node_id, exc)

    def stalled(self) -> bool:
        return time.monotonic() - self.loop.stats.last_tick > self.stall_s

    def run(self) -> None:
        next_beat, samples = 0.0, []
        while not self.stopping.wait(1.0 if next_beat else 0.0):
            if self.stalled():
                logger.error("node %s: engine loop stalled; heartbeats stop", self.node_id)
                continue
            try:
                sample = self.sample()
                samples.append(sample)
                try:  # the heartbeat first: its reply may carry the signing key
                    if time.monotonic() >= next_beat:
                        body, samples = self.heartbeat_body(samples), []
                        next_beat = time.monotonic() + self.period_s
                        self.send_heartbeat(body)
                finally:
                    self.publish(sample)
            except Exception:
                logger.exception("node %s: heartbeat failed", self.node_id)
                next_beat = time.monotonic() + self.period_s

    def start(self) -> threading.Thread:
        t = threading.Thread(target=self.run, name="agent", daemon=True)
        t.start()
        return t
