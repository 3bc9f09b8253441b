"""The polyhedral front end of one program: model, dependences, isl schedule and the analysis
of its outer bands, done once and reused for every config a target builds from it. isl's
own failures come out as ScheduleError."""

from __future__ import annotations

from dataclasses import dataclass

import islpy as isl

from akg.errors import ScheduleError
from akg.polyhedral.deps import Dependences, compute_dependences
from akg.polyhedral.model import PolyModel, build_model
from akg.polyhedral.row_partials import fuse_row_partials
from akg.polyhedral.schedule import schedule as isl_schedule
from akg.polyhedral.siblings import fuse_sibling_reductions
from akg.polyhedral.bands import BandInfo, analyze


@dataclass
class ScheduledProgram:
    model: PolyModel
    deps: Dependences
    schedule: isl.Schedule
    bands: list[BandInfo]
    fallback: str | None  # why the sequential schedule was used, if it was


def schedule_program(program, fusion: str = "smart", siblings: bool = False) -> ScheduledProgram:
    """The front end of `program` under a fusion strategy; `siblings`: also fuse sibling
    reductions that read the same data into one loop (`polyhedral.siblings`; not under
    fusion "none"), for a target whose lowering reduces several statements in one loop."""
    try:
        model = build_model(program)
        deps = compute_dependences(model)
        result = isl_schedule(model, deps, fusion)
        tree = result.schedule
        if not result.fallback:
            tree = fuse_row_partials(model, tree, deps)
            if siblings and fusion != "none":
                tree = fuse_sibling_reductions(model, tree, deps)
        return ScheduledProgram(model, deps, tree, analyze(model, tree), result.fallback)
    except isl.Error as e:
        raise ScheduleError(f"{program.name}: polyhedral analysis failed: {e}") from e
