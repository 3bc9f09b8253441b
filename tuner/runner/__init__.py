"""Runners: built candidates -> verified costs in the target's unit. `Runner` is the interface
(`submit` returns futures); `LocalRunner` measures in an isolated worker process,
`InProcessRunner` in this process."""

from akg.tuner.runner.evaluate import TaskArrays, load_task, run_artifact
from akg.tuner.runner.in_process import InProcessRunner
from akg.tuner.runner.local import LocalRunner
from akg.tuner.runner.runner import MeasureResult, Runner, TaskData

__all__ = ["InProcessRunner", "LocalRunner", "MeasureResult", "Runner", "TaskArrays", "TaskData", "load_task",
           "run_artifact"]
