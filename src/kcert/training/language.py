"""The synthetic language the training comparison learns: generated here, no download.

A sparse first-order Markov source over ``vocab`` symbols (each symbol has ``branching`` possible
successors with Dirichlet weights) mixed with periodic sequences: with probability
``periodic_fraction`` a sequence is a random prefix of length ``period`` in
``[min_period, max_period]``, drawn from the same chain, repeated to the end. A model learns the
transition table first (the loss falls to about the chain's entropy rate) and then to continue a
repetition, which needs attention over positions: the loss keeps falling over the few hundred
steps of a short run instead of flattening at once. The language is fixed by ``seed`` (the same
for every run); each training seed draws its own sequences from it.

Numpy only: batches are int64 arrays; the training loop turns them into tensors.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..errors import ParameterError

# Streams of the per-seed random generators (independent of kcert.execution.seeding's streams).
TRAIN_STREAM = 11
EVAL_STREAM = 12


@dataclass(frozen=True)
class Language:
    vocab: int = 64
    branching: int = 4
    periodic_fraction: float = 0.5
    min_period: int = 3
    max_period: int = 12
    seed: int = 20240611

    def __post_init__(self):
        if not (isinstance(self.vocab, int) and self.vocab >= 4):
            raise ParameterError(f"Language.vocab must be an integer >= 4, got {self.vocab!r}")
        if not (isinstance(self.branching, int) and 1 <= self.branching <= self.vocab):
            raise ParameterError(f"Language.branching must be an integer in [1, vocab], got {self.branching!r}")
        if not 0.0 <= self.periodic_fraction <= 1.0:
            raise ParameterError(f"Language.periodic_fraction must lie in [0, 1], got {self.periodic_fraction!r}")
        if not (isinstance(self.min_period, int) and 1 <= self.min_period <= self.max_period):
            raise ParameterError(f"Language periods must satisfy 1 <= min_period <= max_period, got "
                                 f"{self.min_period!r}, {self.max_period!r}")

    @cached_property
    def _table(self) -> tuple[np.ndarray, np.ndarray]:
        """successors (vocab, branching) and their cumulative probabilities (vocab, branching)."""
        rng = np.random.default_rng(np.random.SeedSequence(self.seed))
        successors = np.stack([rng.choice(self.vocab, self.branching, replace=False) for _ in range(self.vocab)])
        probs = rng.dirichlet(np.ones(self.branching), size=self.vocab)
        return successors.astype(np.int64), np.cumsum(probs, axis=1)

    @property
    def entropy_rate(self) -> float:
        """Entropy per token of the Markov chain in nats (the loss floor of a non-periodic sequence
        given its previous token; a repetition's tokens after its first period cost nothing)."""
        _, cum = self._table
        p = np.diff(cum, axis=1, prepend=0.0)
        # stationary distribution of the chain
        successors, _ = self._table
        transition = np.zeros((self.vocab, self.vocab))
        np.add.at(transition, (np.repeat(np.arange(self.vocab), self.branching), successors.ravel()), p.ravel())
        values, vectors = np.linalg.eig(transition.T)
        pi = np.real(vectors[:, np.argmin(np.abs(values - 1.0))])
        pi = pi / pi.sum()
        per_state = -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0), axis=1)
        return float(pi @ per_state)

    def sample(self, rng: np.random.Generator, batch: int, length: int) -> np.ndarray:
        """``batch`` sequences of ``length`` tokens (int64)."""
        successors, cum = self._table
        out = np.empty((batch, length), np.int64)
        out[:, 0] = rng.integers(0, self.vocab, batch)
        u = rng.random((batch, length))
        for t in range(1, length):
            choice = (u[:, t, None] > cum[out[:, t - 1]]).sum(axis=1)
            out[:, t] = successors[out[:, t - 1], np.minimum(choice, self.branching - 1)]
        periodic = rng.random(batch) < self.periodic_fraction
        periods = rng.integers(self.min_period, self.max_period + 1, batch)
        cols = np.arange(length)
        for b in np.nonzero(periodic)[0]:
            out[b] = out[b, cols % periods[b]]
        return out


def generator(seed: int, stream: int, index: int) -> np.random.Generator:
    """A generator that depends on (seed, stream, index) alone: batch ``index`` of training seed
    ``seed`` is the same in both arms and in a resumed run."""
    return np.random.default_rng(np.random.SeedSequence(entropy=int(seed), spawn_key=(int(stream), int(index))))


def training_batch(language: Language, seed: int, step: int, batch: int, length: int) -> np.ndarray:
    return language.sample(generator(seed, TRAIN_STREAM, step), batch, length)


def evaluation_set(language: Language, sequences: int, length: int) -> np.ndarray:
    """The held-out sequences every run is evaluated on (the same for every seed and arm)."""
    return language.sample(generator(language.seed, EVAL_STREAM, 0), sequences, length)
