"""nvcc on generated CUDA C: a cubin (or PTX) for one arch, built in a temporary folder, and
the resources ptxas reports per kernel (`--resource-usage`: registers, shared memory, spills,
stack), which the backend checks against the GPU's limits. No GPU is needed."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass

from akg.backends.cuda.errors import NvccError

TIMEOUT_S = 120
# 177: a variable TVM's common-subexpression pass declared and did not use
FLAGS = ("-O3", "-diag-suppress", "177,550")


@dataclass(frozen=True)
class KernelResources:
    """What ptxas reports for one kernel."""

    name: str
    registers: int = 0
    shared_bytes: int = 0
    stack_bytes: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    barriers: int = 0


def nvcc_path() -> str | None:
    found = shutil.which("nvcc")
    if found:
        return found
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    path = os.path.join(home, "bin", "nvcc")
    return path if os.access(path, os.X_OK) else None


def _run(source: str, arch: str, kind: str, kernel: str, extra: tuple[str, ...] = ()) -> tuple[bytes, str]:
    nvcc = nvcc_path()
    if nvcc is None:
        raise NvccError(f"{kernel}: nvcc not found (on PATH, or in $CUDA_HOME/bin)")
    with tempfile.TemporaryDirectory(prefix="akg-nvcc-") as tmp:
        src, out = os.path.join(tmp, "kernel.cu"), os.path.join(tmp, f"kernel.{kind}")
        with open(src, "w") as f:
            f.write(source)
        cmd = [nvcc, f"-arch={arch}", f"-{kind}", *FLAGS, *extra, "-o", out, src]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise NvccError(f"{kernel}: nvcc ran past {TIMEOUT_S} s") from None
        log = proc.stdout + proc.stderr
        if proc.returncode != 0:
            errors = [line.strip() for line in log.splitlines() if "error" in line.lower()]
            first = errors[0] if errors else (log.strip().splitlines() or ["(no output)"])[-1]
            raise NvccError(f"{kernel}: nvcc -arch={arch} failed: {first}")
        with open(out, "rb") as f:
            return f.read(), log


def compile_cubin(source: str, arch: str, kernel: str) -> tuple[bytes, dict[str, KernelResources]]:
    """The cubin of `source` for `arch`, and each kernel's resources by kernel name."""
    data, log = _run(source, arch, "cubin", kernel, ("--resource-usage",))
    return data, parse_resource_usage(log)


def compile_ptx(source: str, arch: str, kernel: str) -> str:
    return _run(source, arch, "ptx", kernel)[0].decode()


_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_PROPS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_BARRIERS = re.compile(r"used (\d+) barriers")
_SMEM = re.compile(r"(\d+) bytes smem")


def parse_resource_usage(log: str) -> dict[str, KernelResources]:
    """Kernel name -> resources, from ptxas's `--resource-usage` lines ("Compiling entry
    function 'k'", "N bytes stack frame, S bytes spill stores, L bytes spill loads", "Used R
    registers, used B barriers, M bytes smem, ...")."""
    out: dict[str, KernelResources] = {}
    current: dict | None = None
    for line in log.splitlines():
        entry = _ENTRY.search(line)
        if entry:
            current = {"name": entry.group(1)}
            out[current["name"]] = KernelResources(**current)
            continue
        if current is None:
            continue
        props = _PROPS.search(line)
        if props:
            current.update(stack_bytes=int(props.group(1)), spill_stores=int(props.group(2)),
                           spill_loads=int(props.group(3)))
        used = _USED.search(line)
        if used:
            current["registers"] = int(used.group(1))
            barriers, smem = _BARRIERS.search(line), _SMEM.search(line)
            current["barriers"] = int(barriers.group(1)) if barriers else 0
            current["shared_bytes"] = int(smem.group(1)) if smem else 0
        out[current["name"]] = KernelResources(**current)
    return out
