"""The builder interface (tuning: config -> compiled candidate): what goes in (`BuildInput`: a
config and, when the tuner lowered it already to rank it, that lowering), what comes out
(`BuildResult`: the artifact as bytes plus its kind, or why there is none), and `Builder`.

Everything here crosses processes by value: the lowering as TVM's JSON text of the PrimFunc
with its loop-nest records (plain dataclasses), the artifact as `akg.target.Artifact` bytes.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from akg.db.record import Status
from akg.graph.ir import Graph
from akg.schedules.space import Config
from akg.target import Artifact


@dataclass(frozen=True)
class Lowered:
    """A candidate's TIR PrimFunc (as TVM JSON text) and its statement records, as the tuner
    lowered them in its own process to rank the candidate."""

    func_json: str
    records: tuple

    @classmethod
    def of(cls, func, records) -> Lowered:
        import tvm

        return cls(tvm.ir.save_json(tvm.IRModule({"main": func})), tuple(records))

    def load(self) -> tuple:
        """(PrimFunc, records), as `Pipeline.build(config, lowered=...)` takes them."""
        import tvm

        return tvm.ir.load_json(self.func_json)["main"], list(self.records)


@dataclass(frozen=True)
class BuildInput:
    """One candidate to build; `lowered` None: the builder lowers it itself."""

    config: Config
    lowered: Lowered | None = None


@dataclass
class BuildResult:
    config: Config
    artifact: Artifact | None = None  # None unless status is ok
    status: Status = Status.OK
    error: str = ""
    seconds: float = 0.0
    features: np.ndarray | None = None


def as_build_input(candidate: BuildInput | Config) -> BuildInput:
    return candidate if isinstance(candidate, BuildInput) else BuildInput(candidate)


class Builder(abc.ABC):
    """Compiles candidates of one subgraph; a candidate that fails is a build_error result,
    never an exception."""

    @abc.abstractmethod
    def build(self, graph: Graph, target, candidates: Sequence[BuildInput | Config]) -> list[BuildResult]:
        """One result per candidate, in order (a bare Config is a candidate to lower)."""

    def close(self) -> None:
        """Release workers and scratch space."""
