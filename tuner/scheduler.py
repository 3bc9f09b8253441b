"""The task scheduler (tuning: which kernel gets the next round): every task once, then the
largest expected gain (occurrences x best cost so far, discounted by the trials it already
had), as Ansor's task scheduler does. `untried` tells the tune loop how many kernels still
wait for their first round, so that it shrinks that round's batch for the budget to reach
them all."""

from __future__ import annotations

import math

from akg.tuner.task import TuningTask


class TaskScheduler:
    def __init__(self, tasks: list[TuningTask]):
        self.tasks = tasks
        self.exhausted: set[int] = set()

    def live(self) -> list[TuningTask]:
        return [t for t in self.tasks if id(t) not in self.exhausted]

    def untried(self) -> list[TuningTask]:
        """The tasks still to get their first round (nothing measured yet, not exhausted)."""
        return [t for t in self.live() if not t.trials]

    def next(self) -> TuningTask | None:
        live = self.live()
        if not live:
            return None
        untried = [t for t in live if not t.trials]
        if untried:
            return untried[0]
        return max(live, key=self.gain)

    def batch_for(self, task: TuningTask, batch: int, remaining: int) -> int:
        """How many candidates `task`'s round measures: `batch`, at most the `remaining`
        budget, and while kernels wait for their first round (this one among them) no more
        than an equal share of what is left, so that every kernel gets a round."""
        n = min(batch, remaining)
        if not task.trials:
            waiting = len(self.untried()) or 1
            n = min(n, max(1, remaining // waiting))
        return max(0, n)

    @staticmethod
    def gain(task: TuningTask) -> float:
        best = task.best
        cost = best.cost if best is not None else 1.0  # a kernel that never ran is worth trying
        return task.occurrences * cost / math.sqrt(1 + len(task.trials))

    def exhaust(self, task: TuningTask) -> None:
        """No more rounds for `task` (its search found nothing new to propose)."""
        self.exhausted.add(id(task))
