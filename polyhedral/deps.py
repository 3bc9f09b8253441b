"""Exact dataflow dependences of a polyhedral model (isl's dataflow analysis)."""

from __future__ import annotations

from dataclasses import dataclass

import islpy as isl

from akg.polyhedral.model import PolyModel


@dataclass(eq=False)
class Dependences:
    flow: isl.UnionMap  # producer instance -> consumer instance (read-after-write, value based)

    @property
    def validity(self) -> isl.UnionMap:
        return self.flow


def compute_dependences(model: PolyModel) -> Dependences:
    """Flow dependences from each write to the reads of the value it stored.

    Every tensor element is written by one chain (init, then updates in reduction order), so
    value-based flow dependences order all conflicting accesses of a schedule that keeps
    every tensor in its own buffer; buffer reuse is decided later, on the final schedule.
    """
    info = isl.UnionAccessInfo.from_sink(model.reads())
    info = info.set_must_source(model.writes())
    info = info.set_schedule_map(model.original_schedule())
    flow = info.compute_flow().get_may_dependence()
    return Dependences(flow=flow.coalesce())
