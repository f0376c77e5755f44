"""Power readings of a node: measured where the hardware allows, modeled elsewhere.

- NVIDIA GPU: NVML (nvidia-ml-py) board power, "measured-nvml".
- CPU with readable RAPL counters (/sys/class/powercap/intel-rapl:*/energy_uj): the
  package energy delta over the interval, "measured-rapl".
- Otherwise: idle_w + (tdp_w - idle_w) * utilization from the node's HardwareProfile,
  "modeled".

Every sample says its source. No Django or torch imports.
"""

from __future__ import annotations

import glob
import time
from dataclasses import dataclass


@dataclass
class PowerSample:
    watts: float
    source: str  # "measured-nvml" | "measured-rapl" | "modeled"


class _Nvml:
    def __init__(self, index: int = 0):
        import pynvml

        pynvml.nvmlInit()
        self.nvml = pynvml
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        self.nvml.nvmlDeviceGetPowerUsage(self.handle)  # fails here if unsupported

    def read(self, utilization: float) -> PowerSample:
        return PowerSample(self.nvml.nvmlDeviceGetPowerUsage(self.handle) / 1000.0, "measured-nvml")


class _Rapl:
    def __init__(self):
        self.files = [
            f
            for f in sorted(glob.glob("/sys/class/powercap/intel-rapl:*/energy_uj"))
            if f.count(":") == 1  # packages only: subzones are included in them
        ]
        if not self.files:
            raise OSError("no RAPL package zones")
        self.max = []
        for f in self.files:
            try:
                self.max.append(int(open(f.replace("energy_uj", "max_energy_range_uj")).read()))
            except OSError:
                self.max.append(2**32)
        self.last = self._read()  # raises PermissionError if not readable
        self.last_t = time.monotonic()

    def _read(self) -> list[int]:
        return [int(open(f).read()) for f in self.files]

    def read(self, utilization: float) -> PowerSample:
        now_v, now_t = self._read(), time.monotonic()
        dt = max(now_t - self.last_t, 1e-3)
        joules = sum(
            ((b - a) % m) / 1e6 for a, b, m in zip(self.last, now_v, self.max, strict=True)
        )
        self.last, self.last_t = now_v, now_t
        return PowerSample(joules / dt, "measured-rapl")


class _Modeled:
    def __init__(self, idle_w: float, tdp_w: float):
        self.idle_w, self.tdp_w = idle_w, tdp_w

    def read(self, utilization: float) -> PowerSample:
        u = min(max(utilization, 0.0), 1.0)
        return PowerSample(self.idle_w + (self.tdp_w - self.idle_w) * u, "modeled")


class PowerMeter:
    """Picks the best source once: NVML (when `gpu`), then RAPL, then the model."""

    def __init__(self, *, idle_w: float, tdp_w: float, gpu: bool = False, gpu_index: int = 0):
        source: _Nvml | _Rapl | None = None
        if gpu:
            try:
                source = _Nvml(gpu_index)
            except Exception:
                source = None
        if source is None:
            try:
                source = _Rapl()
            except (OSError, ValueError):
                source = None
        self.fallback = _Modeled(idle_w, tdp_w)
        self.source: _Nvml | _Rapl | _Modeled = self.fallback if source is None else source

    def read(self, utilization: float) -> PowerSample:
        try:
            return self.source.read(utilization)
        except Exception:  # a sensor that stops answering: fall back, and say so
            self.source = self.fallback
            return self.fallback.read(utilization)
