"""Compiling one candidate (runs in a builder worker, or in the tuner's process): reuse the
lowering the tuner sent, else lower; compile through the target's backend; export the
executable as an Artifact; compute the candidate's features from what was built."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
import weakref

from akg.db.record import Status
from akg.graph.ir import Graph
from akg.tuner.builder.builder import BuildInput, BuildResult


@contextlib.contextmanager
def scratch_directory(directory: str | None):
    """Temporary files made while building (the backend's exports) go under `directory`, so
    that whatever a killed worker leaves behind goes with the builder's directory."""
    if directory is None:
        yield
        return
    previous, tempfile.tempdir = tempfile.tempdir, directory
    try:
        yield
    finally:
        tempfile.tempdir = previous


SCRATCH_PREFIX = "akg-build-"


class ScratchDirectory:
    """A builder's directory for temporary files: its own temporary one unless given,
    removed by `close()`, or when the builder is collected or the process exits (a builder
    nobody closed left an empty directory in /tmp per use). Its name holds the process id, so
    that the next builder removes what a killed process left (`sweep_scratch`)."""

    def __init__(self, directory: str | None):
        self._remove = None
        if directory is None:
            sweep_scratch()
            directory = tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-")
            self._remove = weakref.finalize(self, shutil.rmtree, directory, ignore_errors=True)
        self.directory = directory

    def close(self) -> None:
        if self._remove is not None:
            self._remove()  # once: a finalizer runs at most once


def sweep_scratch(root: str | None = None) -> int:
    """Remove the builders' scratch directories under `root` (the temporary directory) whose
    process is gone; returns how many."""
    root = root or tempfile.gettempdir()
    removed = 0
    try:
        names = os.listdir(root)
    except OSError:
        return 0
    for name in names:
        pid = name[len(SCRATCH_PREFIX):].split("-", 1)[0] if name.startswith(SCRATCH_PREFIX) else ""
        if not pid.isdigit() or _alive(int(pid)):
            continue
        shutil.rmtree(os.path.join(root, name), ignore_errors=True)
        removed += 1
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


def build_candidate(graph: Graph, target, candidate: BuildInput, directory: str | None = None) -> BuildResult:
    """Build one candidate into a BuildResult (never raises for a bad candidate)."""
    from akg.compiler import pipeline_for
    from akg.errors import AkgError, ScheduleError
    from akg.tuner.features import extract_features

    config = candidate.config
    t0 = time.perf_counter()
    try:
        with scratch_directory(directory):
            pipeline = pipeline_for(graph, target, config.fusion)
            lowered = candidate.lowered.load() if candidate.lowered is not None else None
            kernel = pipeline.build(config, lowered=lowered)
            artifact = pipeline.target.backend().export(kernel.executable)
        feats = extract_features(pipeline, config, kernel)
        return BuildResult(config, artifact, Status.OK, "", time.perf_counter() - t0, feats)
    except ScheduleError as e:  # an illegal config: the search counts and skips it
        error = f"illegal config: {e}"
    except AkgError as e:
        error = str(e)
    except Exception as e:  # noqa: BLE001  (a bug while building one candidate must not stop tuning)
        error = f"{type(e).__name__}: {e}"
    return BuildResult(config, None, Status.BUILD_ERROR, error, time.perf_counter() - t0)
