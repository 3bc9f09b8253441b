"""The search strategy interface (tuning: which configs to measure next), with the exploration
helpers every strategy shares, the registry of strategies by name and `make_search`.
Nothing already measured, or being measured by another tuner, is proposed."""

from __future__ import annotations

import abc

from akg.registry import Registry
from akg.schedules.space import Config
from akg.tuner.cost_model.cost_model import CostModel
from akg.tuner.task import TuningTask


class SearchStrategy(abc.ABC):
    name = "search"

    @abc.abstractmethod
    def propose(self, task: TuningTask, model: CostModel, n: int) -> list[Config]:
        """Up to n legal configs never measured for this task."""

    @staticmethod
    def _fresh(task: TuningTask, seen: set[str], config: Config) -> bool:
        key = config.to_json()
        if key in seen or not task.is_new(key):
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
        """The config `akg compile` uses and the recipe's alternatives to it
        (`Recipe.alternative_configs`), then the default config of every other fusion strategy
        and their alternatives, those not measured yet. A model's budget spread over many
        kernels can leave each only a few trials (ResNet-18 width 16: 18 kernels, 64 trials),
        so the recipe's targeted alternatives to the default come first."""
        fusions = task.fusions()
        primary = task.default_config()
        configs = [primary, *task.alternative_configs(primary.fusion)]
        configs += [task.default_config(f) for f in fusions]
        configs += [c for f in fusions if f != primary.fusion for c in task.alternative_configs(f)]
        return [c for c in configs if self._fresh(task, seen, c)]


SEARCH_STRATEGIES: Registry[type[SearchStrategy]] = Registry("search strategy")


def register_search(cls: type[SearchStrategy]) -> type[SearchStrategy]:
    """Class decorator: `SEARCH_STRATEGIES[cls.name] = cls`."""
    SEARCH_STRATEGIES.register(cls.name, cls)
    return cls


def make_search(name: str | SearchStrategy, **kwargs) -> SearchStrategy:
    if isinstance(name, SearchStrategy):
        return name
    return SEARCH_STRATEGIES.get(name)(**kwargs)
