"""Derived seeds. Replicate r of a run with seed s draws from a generator seeded by (s, stream, r)
alone, so replicates can run in any order, in batches or on other processes and still give the
same certificate. Nothing here touches global RNG state."""

from __future__ import annotations

import numpy as np
import torch

# Independent streams of one run.
INPUTS = 0
WEIGHTS = 1
ALGEBRA = 2
BOOTSTRAP = 3


def derived_seed(seed: int, stream: int, index: int = 0) -> int:
    """A 63-bit seed that depends on (seed, stream, index) only."""
    state = np.random.SeedSequence(entropy=int(seed), spawn_key=(int(stream), int(index)))
    return int(state.generate_state(1, np.uint64)[0] >> np.uint64(1))


def generator(seed: int, stream: int, index: int, device: torch.device | str = "cpu") -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed(derived_seed(seed, stream, index))
    return g
