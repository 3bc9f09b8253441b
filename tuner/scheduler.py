"""The task scheduler (tuning: which kernel gets the next round): every task once, then the
largest expected gain (occurrences x best cost so far, discounted by the trials it already
had), as Ansor's task scheduler does."""

from __future__ import annotations

import math

from akg.tuner.task import TuningTask


class TaskScheduler:
    def __init__(self, tasks: list[TuningTask]):
        self.tasks = tasks
        self.exhausted: set[int] = set()

    def next(self) -> TuningTask | None:
        live = [t for t in self.tasks if id(t) not in self.exhausted]
        if not live:
            return None
        untried = [t for t in live if not t.trials]
        if untried:
            return untried[0]
        return max(live, key=self.gain)

    @staticmethod
    def gain(task: TuningTask) -> float:
        best = task.best
        cost = best.cost if best is not None else 1.0  # a kernel that never ran is worth trying
        return task.occurrences * cost / math.sqrt(1 + len(task.trials))

    def exhaust(self, task: TuningTask) -> None:
        """No more rounds for `task` (its search found nothing new to propose)."""
        self.exhausted.add(id(task))
