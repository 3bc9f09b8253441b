"""EvolutionarySearch ("evolutionary"): a population seeded with the best measured configs, the
default config of every fusion strategy and random samples evolves by mutation and crossover
for a few generations with the cost model as fitness; the batch is the defaults and the recipe's
alternatives to them not measured yet (`SearchStrategy._defaults`: akg compile's config and its
alternatives first), then the model's top picks plus
an epsilon share of random unmeasured configs (exploration). While the model is
uninformative (untrained, or the random model) the batch is drawn from the seeded random
generator alone, so a tune with a fixed seed and the random model is deterministic."""

from __future__ import annotations

from akg.schedules.space import Config
from akg.tuner.cost_model.cost_model import CostModel
from akg.tuner.search.search import SearchStrategy, register_search
from akg.tuner.task import TuningTask


@register_search
class EvolutionarySearch(SearchStrategy):
    name = "evolutionary"

    def __init__(self, population: int = 32, generations: int = 2, epsilon: float = 0.25,
                 mutation: float = 0.8, **_):
        self.population, self.generations = population, generations
        self.epsilon, self.mutation = epsilon, mutation

    def propose(self, task, model, n):
        seen: set[str] = set()
        first = self._defaults(task, seen)  # those a smaller batch before left out
        if not model.informative:
            return (first + self._random(task, n, seen))[:n]
        rng = task.rng
        parents = task.best_configs(8) or [task.default_config()]
        population = list(parents) + self._random(task, max(0, self.population - len(parents)), set(seen), True)
        pool: dict[str, Config] = {}
        for _ in range(self.generations):
            children = []
            for _ in range(self.population):
                same_fusion = [p for p in population if p.fusion == population[0].fusion]
                if rng.random() < self.mutation or len(same_fusion) < 2:
                    parent = rng.choice(population)
                    child = task.space(parent.fusion).mutate(parent, rng)
                else:
                    a, b = rng.sample(same_fusion, 2)
                    child = task.space(a.fusion).crossover(a, b, rng)
                key = child.to_json()
                if task.is_new(key) and key not in pool and task.space(child.fusion).is_legal(child):
                    pool[key] = child
                    children.append(child)
            if not children:
                break
            ranked = self._rank(task, model, children + [p for p in population if p.to_json() in pool])
            population = ranked[: self.population] or population
        candidates = [c for c in self._rank(task, model, list(pool.values())) if c.to_json() not in seen]
        n_explore = max(1, int(round(self.epsilon * n))) if n > 1 else 0
        picked = first + candidates[: max(0, n - n_explore - len(first))]
        seen.update(c.to_json() for c in picked)
        picked += self._random(task, n - len(picked), seen, True)
        return picked[:n]

    @staticmethod
    def _rank(task: TuningTask, model: CostModel, configs: list[Config]) -> list[Config]:
        feats = [(c, task.features(c)) for c in configs]
        feats = [(c, f) for c, f in feats if f is not None]
        if not feats:
            return []
        scores = model.predict([f for _, f in feats])
        order = sorted(range(len(feats)), key=lambda i: -float(scores[i]))
        return [feats[i][0] for i in order]
