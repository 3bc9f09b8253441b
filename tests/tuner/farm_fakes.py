"""Test-only parts for the Dask tests (test_dask.py), importable on Dask workers (the tests put
this folder on their path):

- `cpu-farm`, a target plug-in (loaded through the `akg.targets` entry point the tests write):
  the generic CPU, whose key names the machine $AKG_FARM_MACHINE (default "a"), so that one
  worker of a local cluster can pretend to be other hardware;
- `FakeRunner`, a deterministic runner: a config's cost is a hash of it, measured in the
  worker's own process; it can take its time (`delay`, leaving a marker file named by its pid
  in `markers` while it measures) or kill its process for planted configs (`kill`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import signal
import time
from concurrent.futures import Future
from pathlib import Path

from akg.backends.cpu.target import CpuTarget, generic_cpu
from akg.db.record import Status
from akg.target import register_target
from akg.tuner.runner.runner import MeasureResult, Runner

KIND = "cpu-farm"
MACHINE_ENV = "AKG_FARM_MACHINE"


@dataclasses.dataclass(frozen=True)
class FarmCpuTarget(CpuTarget):
    kind: str = KIND
    machine: str = "a"

    @property
    def key(self) -> str:
        return f"farm-{self.machine}-{super().key}"


def farm_cpu() -> FarmCpuTarget:
    base = generic_cpu()
    values = {f.name: getattr(base, f.name) for f in dataclasses.fields(base)}
    values.update(kind=KIND, machine=os.environ.get(MACHINE_ENV, "a"))
    return FarmCpuTarget(**values)


def fake_cost(config) -> float:
    """A config's deterministic cost: 10-20 us by a hash of its JSON."""
    digest = hashlib.sha1(config.to_json().encode()).hexdigest()
    return 1e-5 * (1 + int(digest[:8], 16) / 0xFFFFFFFF)


class FakeRunner(Runner):
    def __init__(self, delay: float = 0.0, markers: str | None = None, kill: frozenset = frozenset()):
        self.delay, self.markers, self.kill = delay, markers, kill

    def submit(self, task, builds, best=None):
        out = []
        for b in builds:
            if b.status != Status.OK:
                result = MeasureResult.unbuilt(b, task.unit)
            else:
                if b.config.to_json() in self.kill:
                    os.kill(os.getpid(), signal.SIGKILL)
                marker = Path(self.markers) / str(os.getpid()) if self.markers else None
                if marker is not None:
                    marker.touch()
                time.sleep(self.delay)
                if marker is not None:
                    marker.unlink()
                result = MeasureResult(b.config, Status.OK, fake_cost(b.config), task.unit, "", b.seconds,
                                       self.delay, b.features)
            future: Future = Future()
            future.set_result(result)
            out.append(future)
        return out


register_target(KIND, farm_cpu, replace=True)
