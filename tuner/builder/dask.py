"""DaskBuilder (tuning: configs -> compiled candidates, on the workers of a Dask cluster): each
candidate is one job of the cluster (`akg.tuner.runner.dask_cluster.DaskCluster`, shared with
the `DaskRunner`), built by that worker's own `LocalBuilder`, which isolates it in a subprocess
with a time limit as on the tuner's machine. A worker builds as many candidates at once as it
has threads; a candidate whose worker is lost twice is a build_error that says so."""

from __future__ import annotations

import functools
from typing import Callable, Sequence

from akg.db.record import Status
from akg.graph.ir import Graph
from akg.schedules.space import Config
from akg.tuner.builder.builder import Builder, BuildInput, BuildResult, as_build_input
from akg.tuner.builder.local import LocalBuilder
from akg.tuner.runner.dask_cluster import DaskCluster, Job, factory_spec, worker_pool


def build_on_worker(session: str, spec: bytes, graph: Graph, target, candidate: BuildInput) -> BuildResult:
    """On a Dask worker: build one candidate with this worker thread's own builder."""
    (result,) = worker_pool(session, "builder", spec, True).build(graph, target, [candidate])
    return result


class DaskBuilder(Builder):
    """Builds on the workers of `cluster` (a DaskCluster, closed by its owner, not here); on
    each worker thread the candidates go to `local()`, a one-process `LocalBuilder` with
    this builder's time limit unless given."""

    def __init__(self, cluster: DaskCluster, timeout: float = 120.0, local: Callable[[], Builder] | None = None):
        self.cluster = cluster
        self._spec = factory_spec(local or functools.partial(LocalBuilder, workers=1, timeout=timeout))

    def build(self, graph: Graph, target, candidates: Sequence[BuildInput | Config]) -> list[BuildResult]:
        session = self.cluster.session
        jobs = [Job("build", build_on_worker, lambda address, c=c: (session, self._spec, graph, target, c),
                    lambda reason, worker, c=c: BuildResult(c.config, None, Status.BUILD_ERROR, reason))
                for c in (as_build_input(c) for c in candidates)]
        self.cluster.submit(jobs)
        return [job.future.result() for job in jobs]
