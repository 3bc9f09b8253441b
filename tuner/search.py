"""Search strategies: which configs to measure next.

`evolutionary`: a population seeded with the best measured configs, the default config of
every fusion strategy and random samples evolves by mutation and crossover for a few
generations with the cost model as fitness; the batch is the model's top picks plus an
epsilon share of random unmeasured configs (exploration). While the model is uninformative
(untrained, or the random model) the batch is drawn from the seeded random generator alone,
so a tune with a fixed seed and the random model is deterministic.
`random`: uniform samples of the knob space. Nothing already measured is proposed again.
"""

from __future__ import annotations

import abc

from akg.registry import Registry
from akg.schedules.space import Config
from akg.tuner.cost_model import CostModel
from akg.tuner.task import TuningTask

SEARCH_STRATEGIES: Registry[type] = Registry("search strategy")


def _register(cls):
    SEARCH_STRATEGIES.register(cls.name, cls)
    return cls


class SearchStrategy(abc.ABC):
    name = "search"

    @abc.abstractmethod
    def propose(self, task: TuningTask, model: CostModel, n: int) -> list[Config]:
        """Up to n legal configs never measured for this task."""

    @staticmethod
    def _fresh(task: TuningTask, seen: set[str], config: Config) -> bool:
        key = config.to_json()
        if key in seen or key in task.measured:
            return False
        seen.add(key)
        return task.space(config.fusion).is_legal(config)

    def _random(self, task: TuningTask, n: int, seen: set[str], by_cost: bool = False) -> list[Config]:
        """Exploration: three quarters random walks (1-4 mutations) from anchors, one quarter
        uniform samples of the space. The anchors are the default configs, or with `by_cost`
        the best measured ones (which makes the walk depend on measured times)."""
        out: list[Config] = []
        fusions = task.fusions()
        anchors = (task.best_configs(4) if by_cost else []) or [task.default_config(f) for f in fusions]
        for _ in range(n * 20):
            if len(out) >= n:
                break
            if task.rng.random() < 0.75:
                config = task.rng.choice(anchors)
                for _ in range(task.rng.randint(1, 4)):
                    config = task.space(config.fusion).mutate(config, task.rng)
            else:
                config = task.space(task.rng.choice(fusions)).sample(task.rng)
            if self._fresh(task, seen, config):
                out.append(config)
        return out

    def _defaults(self, task: TuningTask, seen: set[str]) -> list[Config]:
        return [c for c in (task.default_config(f) for f in task.fusions()) if self._fresh(task, seen, c)]


@_register
class RandomSearch(SearchStrategy):
    name = "random"

    def __init__(self, **_):
        pass

    def propose(self, task, model, n):
        seen: set[str] = set()
        return (self._defaults(task, seen) + self._random(task, n, seen))[:n]


@_register
class EvolutionarySearch(SearchStrategy):
    name = "evolutionary"

    def __init__(self, population: int = 32, generations: int = 2, epsilon: float = 0.25,
                 mutation: float = 0.8, **_):
        self.population, self.generations = population, generations
        self.epsilon, self.mutation = epsilon, mutation

    def propose(self, task, model, n):
        seen: set[str] = set()
        first = self._defaults(task, seen) if not task.trials else []
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
                if key not in task.measured and key not in pool and task.space(child.fusion).is_legal(child):
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


def make_search(name: str | SearchStrategy, **kwargs) -> SearchStrategy:
    if isinstance(name, SearchStrategy):
        return name
    return SEARCH_STRATEGIES.get(name)(**kwargs)
