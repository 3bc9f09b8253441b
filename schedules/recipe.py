"""The interface of a target's mapping recipe: how the target maps the bands of a schedule
tree (its default steps and its knob space), and how it applies a Config's steps through the
tree primitives of `akg.polyhedral.tree`. Each target kind implements it in
`schedules/<kind>.py`; shared code reaches it through `Target.recipe()`."""

from __future__ import annotations

import abc

from akg.polyhedral.bands import BandInfo
from akg.schedules.space import Config, Space


class Recipe(abc.ABC):
    """One target's mapping of schedule trees."""

    # the front end fuses sibling reductions that read the same data into one loop
    # (`polyhedral.siblings`): for a target whose lowering reduces several statements at once
    fuses_sibling_reductions: bool = False

    def __init__(self, target):
        self.target = target

    def prepare(self, program, dtype: str):
        """The program as this target wants it scheduled (e.g. long reductions split into
        vector lanes); the identity by default."""
        return program

    @abc.abstractmethod
    def default_config(self, bands: list[BandInfo], dtype: str, fusion: str = "smart") -> Config:
        """The heuristic config: explicit steps for every band and the kernel."""

    def alternative_configs(self, bands: list[BandInfo], dtype: str, fusion: str = "smart") -> list[Config]:
        """Configs the default's rules choose where a close call of theirs goes the other way
        (none by default): the tuner measures them right after the default, so that a few
        trials already decide those calls for the kernel at hand."""
        return []

    @abc.abstractmethod
    def space(self, bands: list[BandInfo], fusion: str = "smart") -> Space: ...

    @abc.abstractmethod
    def validate(self, config: Config, bands: list[BandInfo]) -> None:
        """ScheduleError for steps this target cannot take on these bands."""

    @abc.abstractmethod
    def apply(self, config: Config, model, schedule, bands: list[BandInfo], dtype: str):
        """The schedule mapped by `config` (validated first), with the marks the TIR generator
        reads (parallel, vector, unroll, promotion points); or a pair (model, schedule) when
        the mapping rewrote the statements (a reduction spread over cooperating threads)."""

    def promote(self, config: Config) -> bool:
        """Does the config promote reused tiles into local buffers?"""
        return config.has("promote")

    def knob_features(self, config: Config, bands: list[BandInfo]) -> list[float]:
        """Numbers describing the config for the tuner's cost model (none by default)."""
        return []
