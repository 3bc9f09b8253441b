"""Runners: built candidates -> verified costs in the target's unit. `Runner` is the interface
(`submit` returns futures, `compare` times several candidates interleaved for the final
pick); `LocalRunner` measures in an isolated worker process,
`InProcessRunner` in this process."""

from akg.tuner.runner.evaluate import TaskArrays, compare_artifacts, load_task, run_artifact
from akg.tuner.runner.in_process import InProcessRunner
from akg.tuner.runner.local import LocalRunner
from akg.tuner.runner.runner import CompareResult, MeasureResult, Runner, TaskData

__all__ = ["CompareResult", "InProcessRunner", "LocalRunner", "MeasureResult", "Runner", "TaskArrays", "TaskData",
           "compare_artifacts", "load_task", "run_artifact"]
