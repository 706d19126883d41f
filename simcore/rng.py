"""A seeded ``numpy.random.Generator`` made on first use, so a simulation that draws nothing never imports numpy.

The only random choices of the server are the ``random`` policy's shuffles (``simcore.scheduler.order_waiting``)
and the snapshot of the generator's state; both reach the generator through attribute access, which builds
``numpy.random.default_rng(seed)`` the first time. Draws are the very ones an eager generator would give.
"""
from __future__ import annotations

from typing import Any


class LazyGenerator:
    """``numpy.random.default_rng(seed)``, built when an attribute is first read (``permutation``,
    ``bit_generator``, ...)."""

    __slots__ = ("seed", "_gen")

    def __init__(self, seed: Any = 0) -> None:
        self.seed = seed
        self._gen: Any = None

    @property
    def generator(self) -> Any:
        if self._gen is None:
            import numpy as np  # start-up: numpy is imported only when a draw is made
            self._gen = np.random.default_rng(self.seed)
        return self._gen

    def __getattr__(self, name: str) -> Any:
        return getattr(self.generator, name)
