"""A tuning task: one subgraph on one target, its knob spaces (one per fusion strategy), what
has been measured for it, and features of candidate configs. The lowering made to compute a
candidate's features is kept (the most recent `LOWERINGS_KEPT`), so that a builder compiles
it instead of lowering the candidate again."""

from __future__ import annotations

import logging
import random
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from akg.errors import AkgError
from akg.graph.subgraph import Subgraph
from akg.polyhedral.schedule import FUSION_STRATEGIES
from akg.schedules.space import Config, Space

log = logging.getLogger(__name__)

LOWERINGS_KEPT = 128  # per task; a search round ranks about 100 candidates


@dataclass
class Trial:
    config: Config
    status: str
    cost: float | None


@dataclass(eq=False)
class TuningTask:
    subgraph: Subgraph
    target: object
    occurrences: int = 1
    seed: int = 0
    trials: list[Trial] = field(default_factory=list)
    measured: set[str] = field(default_factory=set)  # config JSON already in the database
    busy: set[str] = field(default_factory=set)  # config JSON being measured (other tuners' leases)
    _pipelines: dict = field(default_factory=dict)
    _features: dict = field(default_factory=dict)
    _spaces: dict = field(default_factory=dict)
    _lowered: OrderedDict = field(default_factory=OrderedDict)  # config JSON -> (PrimFunc, records)

    def __post_init__(self):
        self.rng = random.Random(f"{self.seed}:{self.subgraph.workload_key}")

    @property
    def key(self) -> str:
        return self.subgraph.workload_key

    @property
    def name(self) -> str:
        return self.subgraph.name

    def is_new(self, key: str) -> bool:
        """Whether a config (its JSON) is worth proposing: not measured, not being measured."""
        return key not in self.measured and key not in self.busy

    def pipeline(self, fusion: str = "smart"):
        if fusion not in self._pipelines:
            from akg.compiler import pipeline_for

            self._pipelines[fusion] = pipeline_for(self.subgraph.graph, self.target, fusion)
        return self._pipelines[fusion]

    def space(self, fusion: str = "smart") -> Space:
        if fusion not in self._spaces:
            self._spaces[fusion] = self.pipeline(fusion).space()
        return self._spaces[fusion]

    def fusions(self) -> tuple[str, ...]:
        return FUSION_STRATEGIES

    def default_config(self, fusion: str | None = None) -> Config:
        """The target's default config under `fusion` (None: the strategy `akg.compiler.build`
        defaults to for this program, `default_fusion`)."""
        if fusion is None:
            from akg.graph.compute.lower import default_fusion

            fusion = default_fusion(self.pipeline().program)
        return self.pipeline(fusion).default_config()

    def alternative_configs(self, fusion: str = "smart") -> list[Config]:
        return self.pipeline(fusion).alternative_configs()

    def features(self, config: Config) -> np.ndarray | None:
        """Features of a candidate from its lowered loop nest (None if it cannot be lowered)."""
        key = config.to_json()
        if key not in self._features:
            from akg.tuner.features import knob_features, loop_nest_features

            try:
                pipeline = self.pipeline(config.fusion)
                func, records = pipeline.lower(config)
                cores = getattr(self.target, "cores", 1)
                self._features[key] = np.asarray(
                    loop_nest_features(records, cores) + knob_features(pipeline, config), np.float32)
                self._lowered[key] = (func, records)
                while len(self._lowered) > LOWERINGS_KEPT:
                    self._lowered.popitem(last=False)
            except AkgError as e:
                log.debug("%s: cannot lower %s: %s", self.name, key, e)
                self._features[key] = None
        elif key in self._lowered:
            self._lowered.move_to_end(key)  # ranked again: likelier to be built
        return self._features[key]

    def lowered(self, config: Config) -> tuple | None:
        """(PrimFunc, records) of a candidate if `features` lowered it lately, else None."""
        return self._lowered.get(config.to_json())

    @property
    def best(self) -> Trial | None:
        ok = [t for t in self.trials if t.status == "ok" and t.cost is not None]
        return min(ok, key=lambda t: t.cost) if ok else None

    def best_configs(self, k: int) -> list[Config]:
        ok = sorted((t for t in self.trials if t.status == "ok" and t.cost is not None), key=lambda t: t.cost)
        return [t.config for t in ok[:k]]
