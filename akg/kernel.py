"""Kernel: the compiled artifact of one subgraph and config, callable on NumPy arrays."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from akg.errors import InputDataError
from akg.graph.compute.lower import Program


def _contiguous(a: np.ndarray) -> np.ndarray:
    """C-contiguous, keeping 0-d arrays 0-d (np.ascontiguousarray makes them 1-d)."""
    return a if a.flags.c_contiguous else np.array(a, order="C")


def _as_complex(a: np.ndarray) -> np.ndarray:
    """A float32 (..., 2) array of (re, im) pairs as the complex64 (...) array it lays out."""
    return np.ascontiguousarray(a).view(np.complex64).reshape(a.shape[:-1])


@dataclass
class KernelStats:
    """Seconds spent per stage, plus what the stages decided."""

    lower_s: float = 0.0
    schedule_s: float = 0.0
    codegen_s: float = 0.0
    compile_s: float = 0.0
    fallback: str | None = None
    statements: int = 0
    local_tensors: int = 0

    @property
    def schedule_and_codegen_s(self) -> float:
        return self.lower_s + self.schedule_s + self.codegen_s


@dataclass
class Kernel:
    name: str
    target: object
    config: object
    program: Program
    func: object  # TIR PrimFunc
    executable: object  # what the target's backend compiled (`Backend.entry` calls it)
    stats: KernelStats = field(default_factory=KernelStats)
    config_source: str = "default"  # "default" heuristic, or where the config came from
    records: tuple = ()  # loop-nest records of the statements (akg.polyhedral.astgen)
    index_bounds: dict = field(default_factory=dict)  # index inputs: exclusive upper bound

    @property
    def input_names(self) -> list[str]:
        return [t.name for t in self.program.inputs]

    @property
    def output_names(self) -> list[str]:
        return [t.name for t in self.program.outputs]

    def tir(self) -> str:
        return self.func.script()

    def source(self, kind: str = "asm") -> str:
        """The target's generated code (kinds per backend: 'asm', 'll' on the CPU)."""
        return self.target.backend().source(self.executable, kind)

    def _arguments(self, args: Sequence[np.ndarray], named: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        ins = self.program.inputs
        if args and named:
            raise InputDataError("pass inputs by position or by name, not both")
        if named:
            missing = [t.name for t in ins if t.name not in named]
            if missing:
                raise InputDataError(f"missing input(s): {', '.join(missing)}")
            extra = sorted(set(named) - {t.name for t in ins})
            if extra:
                raise InputDataError(f"unknown input(s): {', '.join(extra)}")
            args = [named[t.name] for t in ins]
        if len(args) != len(ins):
            raise InputDataError(f"kernel {self.name} takes {len(ins)} inputs, got {len(args)}")
        out = []
        pairs = self.program.complex_io
        for t, a in zip(ins, args):
            a = np.asarray(a)
            if t.name in pairs:  # a complex64 input: the kernel reads it as float32 (re, im) pairs
                if a.dtype != np.complex64 or (*a.shape, 2) != tuple(t.shape):
                    raise InputDataError(f"input {t.name} must be complex64{list(t.shape[:-1])}, "
                                         f"got {a.dtype}{list(a.shape)}")
                out.append(_contiguous(a).view(np.float32).reshape(t.shape))
                continue
            if a.shape != t.shape or a.dtype != np.dtype(t.dtype):
                raise InputDataError(
                    f"input {t.name} must be {t.dtype}{list(t.shape)}, got {a.dtype}{list(a.shape)}")
            bound = self.index_bounds.get(t.name)
            if bound is not None and a.size and (a.min() < 0 or a.max() >= bound):
                raise InputDataError(f"input {t.name} holds indices outside [0, {bound})")
            out.append(_contiguous(a))
        return out

    def device_arguments(self, *args: np.ndarray, **named: np.ndarray):
        """Device tensors for inputs, parameters and (fresh) outputs, in call order."""
        backend = self.target.backend()
        arrays = [*self._arguments(args, named), *(_contiguous(a) for a in self.program.params.values())]
        tensors = [backend.to_device(a) for a in arrays]
        outs = [backend.to_device(np.zeros(t.shape, t.dtype)) for t in self.program.outputs]
        return tensors, outs

    def __call__(self, *args: np.ndarray, **named: np.ndarray) -> list[np.ndarray]:
        """Run on NumPy arrays (by position or input name); returns the outputs in order."""
        backend = self.target.backend()
        tensors, outs = self.device_arguments(*args, **named)
        backend.entry(self.executable)(*tensors, *outs)
        pairs = self.program.complex_io
        return [_as_complex(backend.to_numpy(o)) if t.name.removesuffix(".copy") in pairs else backend.to_numpy(o)
                for t, o in zip(self.program.outputs, outs)]
