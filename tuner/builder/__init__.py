"""Builders: tuning candidates (configs, with the lowering the tuner made to rank them) ->
artifacts as bytes. `Builder` is the interface; `LocalBuilder` builds in a process pool,
`InProcessBuilder` in this process."""

from akg.tuner.builder.builder import Builder, BuildInput, BuildResult, Lowered, as_build_input
from akg.tuner.builder.compile import build_candidate
from akg.tuner.builder.in_process import InProcessBuilder
from akg.tuner.builder.local import LocalBuilder

__all__ = ["Builder", "BuildInput", "BuildResult", "InProcessBuilder", "LocalBuilder", "Lowered",
           "as_build_input", "build_candidate"]
