"""An in-process builder and runner that compile and run nothing: every candidate "builds",
and its cost is a hash of its config (deterministic, distinct). For tests of the tune loop's
bookkeeping (budgets, shared databases) that need no kernel."""

from __future__ import annotations

import hashlib
import threading
import time

from akg.db import Status
from akg.tuner.builder import Builder
from akg.tuner.builder.builder import BuildResult, as_build_input
from akg.tuner.runner import MeasureResult, Runner
from akg.tuner.runner.runner import done


def fake_cost(config) -> float:
    return 1e-6 * (1 + int(hashlib.sha1(config.to_json().encode()).hexdigest()[:6], 16) % 1000)


class FakeBuilder(Builder):
    def build(self, graph, target, candidates):
        return [BuildResult(as_build_input(c).config) for c in candidates]


class FakeRunner(Runner):
    """Measures each candidate as `fake_cost`, after `delay` seconds; keeps what it measured
    (`measured`, config JSON in order). `before_first` runs once, at the first submit (while
    the tuner holds its first round's leases)."""

    def __init__(self, delay: float = 0.0, before_first=None):
        self.delay, self.before_first = delay, before_first
        self.measured: list[str] = []
        self._lock = threading.Lock()

    def submit(self, task, builds, best=None):
        hook, self.before_first = self.before_first, None
        if hook is not None:
            hook()
        out = []
        for b in builds:
            time.sleep(self.delay)
            with self._lock:
                self.measured.append(b.config.to_json())
            out.append(done(MeasureResult(b.config, Status.OK, fake_cost(b.config), task.unit)))
        return out
