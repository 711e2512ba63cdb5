"""Seeds derived from seeds, in one place (like Gymnasium's ``utils/seeding``).

Everything random in agentgym (which tasks a batch draws, each environment's faults, each turn's
sampling, each trainer step's shuffles) draws from its own stream, named by the integers that
say what it is for: ``derive_seed(seed, ROLLOUT, step)``. NumPy's ``SeedSequence`` hashes them,
so streams with different names are independent and a run's numbers depend only on its seed.
"""

from __future__ import annotations

import numpy as np

__all__ = ["derive_seed", "stream_rng"]


def derive_seed(*names: int, bits: int = 31) -> int:
    """An integer seed in ``[0, 2**bits)`` for the stream named by ``names`` (a base seed first).

    Raises:
        ValueError: no names, or ``bits`` outside 1..32.
    """
    if not names:
        raise ValueError("derive_seed needs at least a base seed")
    if not 1 <= bits <= 32:
        raise ValueError(f"bits must be in 1..32, got {bits}")
    return int(np.random.SeedSequence(list(names)).generate_state(1)[0]) >> (32 - bits)


def stream_rng(*names: int) -> np.random.Generator:
    """A NumPy generator for the stream named by ``names`` (a base seed first)."""
    if not names:
        raise ValueError("stream_rng needs at least a base seed")
    return np.random.default_rng(np.random.SeedSequence(list(names)))
