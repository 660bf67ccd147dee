"""Provenance: the hardware and software a certificate was produced on."""

from __future__ import annotations

import platform
import sys
from importlib import metadata

import torch

from ..version import __version__
from . import fused


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# the CPU's instruction sets that decide which arithmetic a bf16/half product or a reduction runs (AMX tiles,
# AVX-512 bf16 dot products, FMA): two hosts that differ here can round the same kernel differently
NUMERIC_FLAGS = ("amx_bf16", "amx_fp16", "avx512_bf16", "avx512_fp16", "avx512f", "avx2", "fma")


def cpu_flags() -> list[str]:
    """Which of :data:`NUMERIC_FLAGS` this CPU has (Linux's /proc/cpuinfo; empty elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            present = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return []
    return [flag for flag in NUMERIC_FLAGS if flag in present]


def cpu_capability() -> str:
    """The instruction set ATen's CPU kernels were dispatched to (``torch.backends.cpu``)."""
    try:
        return str(torch.backends.cpu.get_cpu_capability())
    except (AttributeError, RuntimeError):
        return "unknown"


def arithmetic(device: torch.device) -> dict:
    """What decides the rounding of the same kernel on the same inputs beyond the code: torch's version, the
    CPU and the instruction set its kernels run, and the GPU on CUDA. A run resumed where this differs mixes
    two hosts' replicates (:func:`kcert.execution.checkpoint.hosts_note`)."""
    found = {"torch": torch.__version__, "cpu": cpu_model(), "cpu_capability": cpu_capability()}
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        found["gpu"] = torch.cuda.get_device_name(index)
    return found


def ranks_note(ranks: list[dict]) -> str | None:
    """A certificate's note when the ranks that shared its replicates ran on other arithmetic (``ranks``: each
    rank's :func:`arithmetic`, in rank order); None when they agree. The environment a certificate records is
    rank 0's, so without this note a run over unlike nodes would pool their roundings silently."""
    if len(ranks) < 2 or all(r == ranks[0] for r in ranks[1:]):
        return None
    parts = [f"rank {i} on " + ", ".join(f"{k} {v}" for k, v in r.items()) for i, r in enumerate(ranks)]
    return ("ranks on other arithmetic: " + "; ".join(parts) + ". Each replicate compares ref and prod on one "
            "rank, but the statistics pool ranks that may round differently (the environment recorded is rank "
            "0's): rerun on like nodes to reproduce it")


def describe_environment(device: torch.device) -> dict:
    env = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cpu_capability": cpu_capability(),
        "cpu_flags": cpu_flags(),
        "torch_threads": torch.get_num_threads(),
        # triton and transformers: the numerics of the Triton kernels and Hugging Face modules certified
        "versions": {"kcert": __version__, **{p: _version(p) for p in ("torch", "numpy", "scipy", "rich", "numba",
                                                                      "triton", "transformers")}},
        "device": str(device),
        # which per-replicate reduction ran: the compiled kernels' sums are equal bit for bit, the
        # torch path's differ from theirs by float64 round-off
        "reduction": fused.kernel_for(device),
    }
    if device.type == "cuda":
        env["gpu"] = arithmetic(device)["gpu"]
        env["cuda"] = torch.version.cuda
    return env
