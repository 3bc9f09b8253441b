"""RandomSearch ("random"): the default config of every fusion strategy, then random walks from
them and uniform samples of the knob space."""

from __future__ import annotations

from akg.tuner.search.search import SearchStrategy, register_search


@register_search
class RandomSearch(SearchStrategy):
    name = "random"

    def __init__(self, **_):
        pass

    def propose(self, task, model, n):
        seen: set[str] = set()
        return (self._defaults(task, seen) + self._random(task, n, seen))[:n]
