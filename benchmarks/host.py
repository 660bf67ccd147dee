"""What a benchmark's wall times depend on, recorded beside them: the CPU, its matrix instruction sets, and how
long it takes to multiply a (128, 256) by a (256, 256) matrix in bf16, float32 and float64, one thread.

The bf16 figure differs by ~60x between the 2-core hosts these benchmarks ran on (0.035 ms with AMX, 2.0 ms
with AVX-512 and no AMX, 13 ms with AVX2 only), and a model's rows in bf16 are mostly such products: a wall
time is that host's, and only runs on one host, side by side, compare (docs/model.md, "Cost").
"""

from __future__ import annotations

import statistics
import time

import torch

from kcert.execution.environment import cpu_capability, cpu_flags, cpu_model

PRODUCT_SHAPES = ((128, 256), (256, 256))


def product_ms(dtype: torch.dtype, repeats: int = 200) -> float:
    """Median milliseconds of one product of PRODUCT_SHAPES in ``dtype`` (one thread, after a warm-up)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        gen = torch.Generator().manual_seed(0)
        a, b = (torch.randn(*shape, generator=gen).to(dtype) for shape in PRODUCT_SHAPES)
        for _ in range(10):
            a @ b
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            a @ b
            times.append(time.perf_counter() - start)
        return 1e3 * statistics.median(times)
    finally:
        torch.set_num_threads(threads)


def describe() -> dict:
    return {"cpu": cpu_model(), "flags": cpu_flags(), "cpu_capability": cpu_capability(),
            "product_ms": {str(d).removeprefix("torch."): round(product_ms(d), 4)
                           for d in (torch.bfloat16, torch.float32, torch.float64)}}


def line(host: dict) -> str:
    ms = host["product_ms"]
    return (f"host: {host['cpu']} ({', '.join(host['flags']) or 'no AVX2'}; torch's kernels "
            f"{host.get('cpu_capability', '?')}); a (128, 256) x (256, 256) product: "
            f"bf16 {ms['bfloat16']:.3f} ms, float32 {ms['float32']:.3f} ms, float64 {ms['float64']:.3f} ms")


if __name__ == "__main__":
    print(line(describe()))
