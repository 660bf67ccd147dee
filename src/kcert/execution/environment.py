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


def describe_environment(device: torch.device) -> dict:
    env = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu": cpu_model(),
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
        index = device.index if device.index is not None else torch.cuda.current_device()
        env["gpu"] = torch.cuda.get_device_name(index)
        env["cuda"] = torch.version.cuda
    return env
