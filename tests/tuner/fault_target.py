"""A test-only target plug-in, `cpu-faults`: the generic CPU, whose candidates misbehave as a
plan says. It is loaded like any third-party target, through the `akg.targets` entry point
(tests/tuner/test_faults.py writes the distribution's metadata next to it), so that the
tuner's worker processes load it by themselves, and production code holds no test branch.

The plan is a JSON file named by $AKG_FAULT_PLAN: {TIR fingerprint: fault}, with "*" for
every other candidate (default "ok"). The fingerprint is a hash of the text of the
candidate's PrimFunc (`fingerprint`), computed where the builder compiles it; the artifact
carries the fault to the runner. Faults:

- build-abort: the builder's worker aborts while compiling (SIGABRT);
- build-hang: compiling never ends;
- segv, abort: the kernel's first call crashes the runner's worker (SIGSEGV, SIGABRT);
- hang: the first call never returns;
- wrong: the first call's outputs are off by one;
- slow-once: the very first call of this candidate, in any process, sleeps 2 s (a candidate
  that a loaded host slows down once); a marker file next to the plan remembers it.
"""

from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import json
import os
import time

from akg.backends.cpu.backend import CpuBackend
from akg.backends.cpu.target import CpuTarget, generic_cpu
from akg.target import Artifact, get_backend, register_backend, register_target

KIND = "cpu-faults"
PLAN_ENV = "AKG_FAULT_PLAN"
FAULTS = ("ok", "build-abort", "build-hang", "segv", "abort", "hang", "wrong", "slow-once")


def fingerprint(func) -> str:
    """The candidate's TIR as text, hashed (the text survives the trip to the builder)."""
    return hashlib.sha1(str(func).encode()).hexdigest()[:16]


def plan() -> dict:
    path = os.environ.get(PLAN_ENV)
    if not path:
        return {}
    with open(path) as f:
        return json.load(f)


def fault_of(func) -> str:
    faults = plan()
    return faults.get(fingerprint(func), faults.get("*", "ok"))


@dataclasses.dataclass(frozen=True)
class FaultCpuTarget(CpuTarget):
    kind: str = KIND

    @property
    def key(self) -> str:
        return f"faults-{super().key}"

    def backend(self):
        return get_backend(FaultBackend.artifact_kind)


def fault_cpu() -> FaultCpuTarget:
    base = generic_cpu()
    values = {f.name: getattr(base, f.name) for f in dataclasses.fields(base)}
    values["kind"] = KIND
    return FaultCpuTarget(**values)


@dataclasses.dataclass
class FaultExecutable:
    module: object
    fault: str
    name: str = ""


class FaultBackend(CpuBackend):
    artifact_kind = "cpu-faults-so"

    def compile(self, func, target, *, reciprocal: bool = True):
        fault = fault_of(func)
        if fault == "build-abort":
            os.abort()
        if fault == "build-hang":
            time.sleep(3600)
        return FaultExecutable(super().compile(func, target, reciprocal=reciprocal), fault, fingerprint(func))

    def export(self, executable) -> Artifact:
        library = super().export(executable.module)
        header = json.dumps({"fault": executable.fault, "name": executable.name}).encode()
        return Artifact(self.artifact_kind, header + b"\n" + library.data)

    def load(self, artifact: Artifact):
        header, _, library = artifact.data.partition(b"\n")
        meta = json.loads(header)
        return FaultExecutable(super().load(Artifact(self.artifact_kind, library)), meta["fault"], meta["name"])

    def source(self, executable, kind: str = "asm") -> str:
        return super().source(executable.module, kind)

    def entry(self, executable):
        kernel = executable.module["main"]
        fault = executable.fault
        calls = [0]

        def call(*tensors):
            calls[0] += 1
            if calls[0] > 1 or fault == "ok":
                return kernel(*tensors)
            if fault == "segv":
                ctypes.string_at(0)
            elif fault == "abort":
                os.abort()
            elif fault == "hang":
                time.sleep(3600)
            elif fault == "slow-once":
                marker = f"{os.environ[PLAN_ENV]}.{hashlib.sha1(executable.name.encode()).hexdigest()[:12]}"
                try:
                    os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
                    time.sleep(2.0)
                except FileExistsError:
                    pass
            kernel(*tensors)
            if fault == "wrong":
                out = tensors[-1]
                out.copyfrom(out.numpy() + 1)

        return call

    def measure(self, executable, tensors, *, number: int, repeat: int) -> list[float]:
        return super().measure(executable.module, tensors, number=number, repeat=repeat)


register_target(KIND, fault_cpu, replace=True)
register_backend(FaultBackend(), replace=True)
