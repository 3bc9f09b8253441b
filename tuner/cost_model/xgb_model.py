"""XgbCostModel: XGBoost with a pairwise ranking objective over loop-nest features, retrained
as measurements arrive (and warm-started from other workloads' records on the same target)."""

from __future__ import annotations

import logging

import numpy as np

from akg.tuner.cost_model.cost_model import CostModel, register_cost_model

log = logging.getLogger(__name__)


@register_cost_model
class XgbCostModel(CostModel):
    """XGBoost with a pairwise ranking objective. Within each workload, a measured candidate's
    relevance is its speed relative to the workload's best (failures score 0)."""

    name = "xgb"
    MIN_SAMPLES = 8

    def __init__(self, seed: int = 0, rounds: int = 60):
        self.seed, self.rounds = seed, rounds
        self.features: list[np.ndarray] = []
        self.costs: list[float | None] = []
        self.groups: list[str] = []
        self.booster = None
        self._trained_on = 0

    @property
    def informative(self) -> bool:
        return self.booster is not None

    def update(self, features, costs, groups) -> None:
        for f, c, g in zip(features, costs, groups):
            if f is None:
                continue
            self.features.append(np.asarray(f, dtype=np.float32))
            self.costs.append(c)
            self.groups.append(g)
        if len(self.features) >= self.MIN_SAMPLES and len(self.features) > self._trained_on:
            self._train()

    def _labels(self) -> tuple[np.ndarray, np.ndarray, list[int]]:
        order = sorted(range(len(self.groups)), key=lambda i: self.groups[i])
        x = np.stack([self.features[i] for i in order])
        y = np.zeros(len(order), dtype=np.float32)
        sizes: list[int] = []
        best: dict[str, float] = {}
        for c, g in zip(self.costs, self.groups):
            if c is not None and c > 0:
                best[g] = min(best.get(g, c), c)
        previous = None
        for pos, i in enumerate(order):
            g, c = self.groups[i], self.costs[i]
            y[pos] = 0.0 if c is None or c <= 0 else best[g] / c
            if g != previous:
                sizes.append(0)
                previous = g
            sizes[-1] += 1
        return x, y, sizes

    def _train(self) -> None:
        import xgboost as xgb

        x, y, sizes = self._labels()
        if float(y.max()) <= 0:
            return
        data = xgb.DMatrix(x, label=y)
        data.set_group(sizes)
        params = {"objective": "rank:pairwise", "eta": 0.2, "max_depth": 6, "min_child_weight": 1,
                  "subsample": 0.9, "seed": self.seed, "nthread": 1, "verbosity": 0}
        self.booster = xgb.train(params, data, num_boost_round=self.rounds)
        self._trained_on = len(self.features)
        log.debug("cost model trained on %d measurements", len(self.features))

    def predict(self, features) -> np.ndarray:
        if self.booster is None:
            return np.zeros(len(features))
        import xgboost as xgb

        return self.booster.predict(xgb.DMatrix(np.stack([np.asarray(f, np.float32) for f in features])))
