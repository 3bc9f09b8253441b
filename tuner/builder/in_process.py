"""InProcessBuilder: candidates built in the tuner's own process (tests and debugging)."""

from __future__ import annotations

from typing import Sequence

from akg.graph.ir import Graph
from akg.schedules.space import Config
from akg.tuner.builder.builder import Builder, BuildInput, BuildResult, as_build_input
from akg.tuner.builder.compile import ScratchDirectory, build_candidate


class InProcessBuilder(ScratchDirectory, Builder):
    def __init__(self, directory: str | None = None):
        super().__init__(directory)

    def build(self, graph: Graph, target, candidates: Sequence[BuildInput | Config]) -> list[BuildResult]:
        return [build_candidate(graph, target, as_build_input(c), self.directory) for c in candidates]
