"""The cost model interface (tuning: candidate features -> a ranking score), the registry of
cost models by name, and `make_cost_model`, which turns a name into one at the API edge."""

from __future__ import annotations

import abc
from typing import Sequence

import numpy as np

from akg.registry import Registry


class CostModel(abc.ABC):
    """Scores candidates: higher means expected faster."""

    name = "model"
    informative = True  # False: scores carry no information (the search then explores)

    @abc.abstractmethod
    def update(self, features: Sequence[np.ndarray], costs: Sequence[float | None],
               groups: Sequence[str]) -> None:
        """Add measurements: one feature vector, cost (None for a failure) and workload key
        (measurements rank only against their own workload) each."""

    @abc.abstractmethod
    def predict(self, features: Sequence[np.ndarray]) -> np.ndarray:
        """Scores of candidates (of one workload)."""


COST_MODELS: Registry[type[CostModel]] = Registry("cost model")


def register_cost_model(cls: type[CostModel]) -> type[CostModel]:
    """Class decorator: `COST_MODELS[cls.name] = cls`."""
    COST_MODELS.register(cls.name, cls)
    return cls


def make_cost_model(name: str | CostModel, seed: int = 0) -> CostModel:
    if isinstance(name, CostModel):
        return name
    return COST_MODELS.get(name)(seed=seed)
