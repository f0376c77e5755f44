"""Seeds the hardware catalogue with real devices and the public source of each figure.

The data is frozen here (not imported from app code) so the migration means the same
thing forever. Figures marked "approximate" are not vendor datasheet numbers: treat them
as planning estimates and edit the profiles (API: PATCH /api/v1/profiles/<slug>) when you
have better ones. Prices are never datasheet figures: NVIDIA publishes no list prices and
cloud prices vary by provider and commitment, so the $/hour figures are approximate
public on-demand prices as of 2025.
"""

from django.db import migrations

NVIDIA_H100 = (
    "NVIDIA H100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h100), SXM5 column"
)
NVIDIA_H200 = (
    "NVIDIA H200 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h200), H200 SXM column"
)
NVIDIA_A100 = "NVIDIA A100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/a100), A100 80GB SXM column"
NVIDIA_L40S = "NVIDIA L40S GPU datasheet (nvidia.com/en-us/data-center/l40s)"
IDLE_GPU = "approximate: typical nvidia-smi idle draw reported publicly; not a datasheet figure"
CLOUD = "approximate: public on-demand cloud price per GPU-hour, 2025; varies by provider"
NO_LIST = "not published by the vendor"

PROFILES = [
    {
        "slug": "h100-sxm",
        "kind": "gpu",
        "vendor": "NVIDIA",
        "model": "H100 SXM5 80GB",
        "memory_gb": 80,
        "memory_bandwidth_gbs": 3350,
        "peak_bf16_tflops": 989.5,
        "tdp_w": 700,
        "idle_w": 70,
        "list_price_usd": None,
        "usd_per_hour": 2.99,
        "sources": {
            "memory_gb": NVIDIA_H100 + ": 80 GB HBM3",
            "memory_bandwidth_gbs": NVIDIA_H100 + ": 3.35 TB/s",
            "peak_bf16_tflops": NVIDIA_H100 + ": BF16 1,979 TFLOPS with sparsity, i.e. 989.5 dense",
            "tdp_w": NVIDIA_H100 + ": max TDP up to 700 W (configurable)",
            "idle_w": IDLE_GPU,
            "list_price_usd": NO_LIST,
            "usd_per_hour": CLOUD,
        },
        "notes": "Hopper, NVLink 900 GB/s. Power measured with NVML.",
    },
    {
        "slug": "h200",
        "kind": "gpu",
        "vendor": "NVIDIA",
        "model": "H200 SXM 141GB",
        "memory_gb": 141,
        "memory_bandwidth_gbs": 4800,
        "peak_bf16_tflops": 989.5,
        "tdp_w": 700,
        "idle_w": 75,
        "list_price_usd": None,
        "usd_per_hour": 3.80,
        "sources": {
            "memory_gb": NVIDIA_H200 + ": 141 GB HBM3e",
            "memory_bandwidth_gbs": NVIDIA_H200 + ": 4.8 TB/s",
            "peak_bf16_tflops": NVIDIA_H200 + ": BF16 1,979 TFLOPS with sparsity, i.e. 989.5 dense",
            "tdp_w": NVIDIA_H200 + ": max TDP up to 700 W (configurable)",
            "idle_w": IDLE_GPU,
            "list_price_usd": NO_LIST,
            "usd_per_hour": CLOUD,
        },
        "notes": "Same compute as H100 SXM with more and faster HBM: a natural verifier.",
    },
    {
        "slug": "a100-80gb-sxm",
        "kind": "gpu",
        "vendor": "NVIDIA",
        "model": "A100 80GB SXM",
        "memory_gb": 80,
        "memory_bandwidth_gbs": 2039,
        "peak_bf16_tflops": 312,
        "tdp_w": 400,
        "idle_w": 55,
        "list_price_usd": None,
        "usd_per_hour": 1.79,
        "sources": {
            "memory_gb": NVIDIA_A100 + ": 80 GB HBM2e",
            "memory_bandwidth_gbs": NVIDIA_A100 + ": 2,039 GB/s",
            "peak_bf16_tflops": NVIDIA_A100 + ": BF16 312 TFLOPS (624 with sparsity)",
            "tdp_w": NVIDIA_A100 + ": max TDP 400 W",
            "idle_w": IDLE_GPU,
            "list_price_usd": NO_LIST,
            "usd_per_hour": CLOUD,
        },
        "notes": "Ampere.",
    },
    {
        "slug": "l40s",
        "kind": "gpu",
        "vendor": "NVIDIA",
        "model": "L40S 48GB",
        "memory_gb": 48,
        "memory_bandwidth_gbs": 864,
        "peak_bf16_tflops": 362.05,
        "tdp_w": 350,
        "idle_w": 35,
        "list_price_usd": None,
        "usd_per_hour": 1.00,
        "sources": {
            "memory_gb": NVIDIA_L40S + ": 48 GB GDDR6 with ECC",
            "memory_bandwidth_gbs": NVIDIA_L40S + ": 864 GB/s",
            "peak_bf16_tflops": NVIDIA_L40S + ": BF16 362.05 TFLOPS (733 with sparsity)",
            "tdp_w": NVIDIA_L40S + ": max power consumption 350 W",
            "idle_w": IDLE_GPU,
            "list_price_usd": NO_LIST,
            "usd_per_hour": CLOUD,
        },
        "notes": "Ada Lovelace, PCIe. A cheap drafter or a small-model verifier.",
    },
    {
        "slug": "d-matrix-corsair",
        "kind": "sram-accelerator",
        "vendor": "d-Matrix",
        "model": "Corsair (per PCIe card)",
        "memory_gb": 2,
        "memory_bandwidth_gbs": 150000,
        "peak_bf16_tflops": 2400,
        "tdp_w": 600,
        "idle_w": 60,
        "list_price_usd": None,
        "usd_per_hour": None,
        "sources": {
            "memory_gb": "d-Matrix Corsair product page and launch announcement (Nov 2024): "
            "2 GB of performance memory (SRAM) per card",
            "memory_bandwidth_gbs": "d-Matrix Corsair launch announcement: ~150 TB/s SRAM "
            "bandwidth per card (approximate)",
            "peak_bf16_tflops": "approximate: d-Matrix publishes 2,400 TFLOPS at 8-bit "
            "(MXINT8) per card and no dense bf16 figure; this is that 8-bit figure",
            "tdp_w": "approximate: d-Matrix Corsair product brief, ~600 W per card",
            "idle_w": "approximate: 10% of TDP, no published figure",
            "list_price_usd": NO_LIST,
            "usd_per_hour": NO_LIST,
        },
        "notes": "Digital in-memory compute; also 256 GB of LPDDR5 capacity memory per card "
        "at much lower bandwidth. Power is modeled (no NVML/RAPL).",
    },
    {
        "slug": "groq-lpu",
        "kind": "sram-accelerator",
        "vendor": "Groq",
        "model": "LPU (GroqChip / GroqCard)",
        "memory_gb": 0.23,
        "memory_bandwidth_gbs": 80000,
        "peak_bf16_tflops": 188,
        "tdp_w": 375,
        "idle_w": 40,
        "list_price_usd": None,
        "usd_per_hour": None,
        "sources": {
            "memory_gb": "Groq GroqChip / GroqCard product brief: 230 MB on-die SRAM per chip",
            "memory_bandwidth_gbs": "Groq GroqChip product brief: up to 80 TB/s on-die memory "
            "bandwidth",
            "peak_bf16_tflops": "approximate: Groq GroqChip product brief gives 188 TFLOPS at "
            "FP16 (750 TOPS INT8); no separate bf16 figure",
            "tdp_w": "Groq GroqCard product brief: 375 W max (240 W typical)",
            "idle_w": "approximate: no published figure",
            "list_price_usd": NO_LIST,
            "usd_per_hour": "not sold by the hour (Groq sells tokens)",
        },
        "notes": "Deterministic, compiler-scheduled; models span many chips. Power is modeled.",
    },
    {
        "slug": "cerebras-wse-3",
        "kind": "sram-accelerator",
        "vendor": "Cerebras",
        "model": "WSE-3 (CS-3 system)",
        "memory_gb": 44,
        "memory_bandwidth_gbs": 21_000_000,
        "peak_bf16_tflops": 125_000,
        "tdp_w": 23_000,
        "idle_w": 2_000,
        "list_price_usd": None,
        "usd_per_hour": None,
        "sources": {
            "memory_gb": "Cerebras WSE-3 announcement (Mar 2024): 44 GB on-chip SRAM",
            "memory_bandwidth_gbs": "Cerebras WSE-3 announcement: 21 PB/s memory bandwidth",
            "peak_bf16_tflops": "approximate: Cerebras quotes 125 PFLOPS peak AI compute, "
            "not stated as dense bf16",
            "tdp_w": "approximate: CS-3 system power ~23 kW (whole system, not the wafer alone)",
            "idle_w": "approximate: no published figure",
            "list_price_usd": NO_LIST,
            "usd_per_hour": NO_LIST,
        },
        "notes": "Wafer-scale; figures are for one CS-3 system.",
    },
    {
        "slug": "generic-cpu",
        "kind": "cpu",
        "vendor": "Generic",
        "model": "2-socket x86 server (modeled on 2x Xeon Platinum 8480+)",
        "memory_gb": 512,
        "memory_bandwidth_gbs": 614,
        "peak_bf16_tflops": 229,
        "tdp_w": 700,
        "idle_w": 200,
        "list_price_usd": 21420,
        "usd_per_hour": None,
        "sources": {
            "memory_gb": "approximate: a common configuration (16x 32 GB DDR5), not a limit",
            "memory_bandwidth_gbs": "Intel ARK Xeon Platinum 8480+: 8 channels DDR5-4800 per "
            "socket = 307 GB/s theoretical, x2 sockets",
            "peak_bf16_tflops": "approximate: AMX 1,024 bf16 FLOP/cycle/core x 56 cores x "
            "2.0 GHz x 2 sockets (theoretical)",
            "tdp_w": "Intel ARK Xeon Platinum 8480+: TDP 350 W per socket, x2",
            "idle_w": "approximate: whole-server idle, no published figure",
            "list_price_usd": "Intel ARK Xeon Platinum 8480+ recommended customer price "
            "$10,710 per CPU, x2 (CPUs only)",
            "usd_per_hour": NO_LIST,
        },
        "notes": "Stand-in for any CPU host (and for simulated nodes). Power measured with RAPL "
        "where available.",
    },
]


def seed(apps, schema_editor):
    HardwareProfile = apps.get_model("nodes", "HardwareProfile")
    for row in PROFILES:
        values = dict(row)
        HardwareProfile.objects.update_or_create(slug=values.pop("slug"), defaults=values)


def unseed(apps, schema_editor):
    HardwareProfile = apps.get_model("nodes", "HardwareProfile")
    HardwareProfile.objects.filter(
        slug__in=[p["slug"] for p in PROFILES], nodes__isnull=True
    ).delete()


class Migration(migrations.Migration):
    dependencies = [("nodes", "0001_initial")]
    operations = [migrations.RunPython(seed, unseed)]
