"""The model zoo's pairs (benchmarks/model_zoo.py) as a ``kcert model`` file, so that the command line and
torchrun run them as a user's file would:

    KCERT_ZOO_PAIRS=llama_eager_vs_sdpa OMP_NUM_THREADS=1 \\
        torchrun --nproc-per-node 2 -m kcert model benchmarks/model_zoo_pairs.py

``KCERT_ZOO_PAIRS`` (comma-separated pair names) builds only those pairs; unset, every pair of the zoo.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import kcert  # noqa: E402
import model_zoo  # noqa: E402


def zoo_pairs() -> list[kcert.ModelPair]:
    wanted = [n for n in os.environ.get("KCERT_ZOO_PAIRS", "").split(",") if n]
    chosen = [model_zoo.pair(n) for n in wanted] if wanted else list(model_zoo.PAIRS)
    pairs = []
    for p in chosen:
        ref, prod = model_zoo.models(p)
        pairs.append(kcert.ModelPair(p.name, ref, prod, model_zoo.inputs(p.arch), description=p.what))
    return pairs
