"""RandomModel: seeded random scores (the null cost model: tests, and a baseline)."""

from __future__ import annotations

import random

import numpy as np

from akg.tuner.cost_model.cost_model import CostModel, register_cost_model


@register_cost_model
class RandomModel(CostModel):
    name = "random"
    informative = False

    def __init__(self, seed: int = 0):
        self.rng = random.Random(seed)

    def update(self, features, costs, groups) -> None:
        pass

    def predict(self, features) -> np.ndarray:
        return np.array([self.rng.random() for _ in features])
