"""CompiledModel: a model's kernels, called in order on a static memory plan; and the
`.akgpack` artifact that holds it all (kernels, plan, weights) for `akg run` without
recompiling."""

from __future__ import annotations

import io
import json
import os
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from akg.errors import ImportFormatError, InputDataError
from akg.graph.ir import Graph

PACK_FORMAT = "akgpack"
PACK_VERSION = 1


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


@dataclass
class KernelCall:
    """One kernel launch: which compiled kernel, the value names it reads and writes, and its
    own weights (kernels are shared by workload, which leaves weights out)."""

    kernel: str  # key into CompiledModel.kernels (the workload key)
    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    params: list = field(default_factory=list)


@dataclass
class MemoryPlan:
    """Intermediate values share slots when their lifetimes do not overlap."""

    slot_of: dict[str, int]
    slot_bytes: list[int]
    naive_bytes: int

    @property
    def peak_bytes(self) -> int:
        return sum(self.slot_bytes)


def plan_memory(calls: Sequence[KernelCall], specs: Mapping[str, TensorSpec], keep: set[str]) -> MemoryPlan:
    """Greedy best-fit slot assignment over value lifetimes (a value lives from the call that
    writes it to the last call that reads it); values in `keep` (model outputs) get no slot."""
    last_use: dict[str, int] = {}
    for i, call in enumerate(calls):
        for name in call.inputs:
            last_use[name] = i
    slot_of: dict[str, int] = {}
    slot_bytes: list[int] = []
    free_after: list[int] = []  # call index after which each slot is free again
    naive = 0
    for i, call in enumerate(calls):
        for name in call.outputs:
            if name in keep:
                continue
            size = specs[name].nbytes
            naive += size
            end = last_use.get(name, i)
            free = [s for s in range(len(slot_bytes)) if free_after[s] < i]
            fits = [s for s in free if slot_bytes[s] >= size]
            if fits:
                slot = min(fits, key=lambda s: slot_bytes[s])
            elif free:
                slot = max(free, key=lambda s: slot_bytes[s])
                slot_bytes[slot] = size
            else:
                slot = len(slot_bytes)
                slot_bytes.append(size)
                free_after.append(-1)
            slot_of[name] = slot
            free_after[slot] = max(end, i)
    return MemoryPlan(slot_of, slot_bytes, naive)


@dataclass
class LoadedKernel:
    """A compiled kernel as the runtime needs it."""

    module: object  # tvm runtime module with `main`
    config: str = ""
    source: str = "default"


@dataclass
class CompiledModel:
    name: str
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    specs: dict[str, TensorSpec]
    calls: list[KernelCall]
    kernels: dict[str, LoadedKernel]
    constants: dict[str, np.ndarray]  # graph constants that are model outputs or kernel inputs
    plan: MemoryPlan
    stats: dict = field(default_factory=dict)
    index_bounds: dict[str, int] = field(default_factory=dict)  # index inputs: exclusive upper bound
    _slots: list | None = field(default=None, repr=False)
    _device_constants: dict | None = field(default=None, repr=False)

    def random_inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Deterministic random inputs (index inputs within their bounds)."""
        from akg.graph.interpreter import random_array
        from akg.graph.types import TensorType

        rng = np.random.default_rng(seed)
        return {s.name: random_array(TensorType(s.shape, s.dtype), rng, self.index_bounds.get(s.name))
                for s in self.inputs}

    # --- running --------------------------------------------------------------------------

    def _bind(self, args, named) -> dict[str, np.ndarray]:
        if args and named:
            raise InputDataError("pass inputs by position or by name, not both")
        if args:
            if len(args) != len(self.inputs):
                raise InputDataError(f"model {self.name} takes {len(self.inputs)} inputs, got {len(args)}")
            named = {s.name: a for s, a in zip(self.inputs, args)}
        missing = [s.name for s in self.inputs if s.name not in named]
        if missing:
            raise InputDataError(f"missing input(s): {', '.join(missing)}")
        extra = sorted(set(named) - {s.name for s in self.inputs})
        if extra:
            raise InputDataError(f"unknown input(s): {', '.join(extra)}")
        out = {}
        for s in self.inputs:
            a = np.asarray(named[s.name])
            if a.shape != s.shape or a.dtype != np.dtype(s.dtype):
                raise InputDataError(f"input {s.name} must be {s.dtype}{list(s.shape)}, got {a.dtype}{list(a.shape)}")
            check_index_bounds(s.name, a, self.index_bounds.get(s.name))
            out[s.name] = a
        return out

    def __call__(self, *args: np.ndarray, **named: np.ndarray) -> list[np.ndarray]:
        import tvm

        dev = tvm.cpu()
        values = self._bind(args, named)
        if self._device_constants is None:  # weights go to the device once, not per call
            self._device_constants = {name: tvm.runtime.tensor(a, dev) for name, a in self.constants.items()}
        env = dict(self._device_constants)
        env.update({name: tvm.runtime.tensor(np.ascontiguousarray(a) if a.ndim else a, dev)
                    for name, a in values.items()})
        if self._slots is None:
            self._slots = [tvm.runtime.empty((max(n, 1),), "uint8", dev) for n in self.plan.slot_bytes]
        for call in self.calls:
            kernel = self.kernels[call.kernel]
            outs = []
            for name in call.outputs:
                spec = self.specs[name]
                if name in self.plan.slot_of:
                    env[name] = self._slots[self.plan.slot_of[name]]._create_view(spec.shape, spec.dtype)
                else:
                    env[name] = tvm.runtime.empty(spec.shape, spec.dtype, dev)
                outs.append(env[name])
            if call.params and not isinstance(call.params[0], tvm.runtime.Tensor):
                call.params = [tvm.runtime.tensor(np.ascontiguousarray(p), dev) for p in call.params]
            kernel.module["main"](*(env[n] for n in call.inputs), *call.params, *outs)
        return [env[s.name].numpy() for s in self.outputs]

    # --- artifact -------------------------------------------------------------------------

    def save(self, path: str | Path) -> Path:
        """Write a self-contained .akgpack (zip): manifest, kernel libraries, weights."""
        path = Path(path)
        manifest = {
            "format": PACK_FORMAT, "version": PACK_VERSION, "name": self.name,
            "inputs": [_spec_json(s) for s in self.inputs], "outputs": [_spec_json(s) for s in self.outputs],
            "specs": [_spec_json(s) for s in self.specs.values()],
            "calls": [{"kernel": c.kernel, "name": c.name, "inputs": list(c.inputs),
                       "outputs": list(c.outputs), "params": len(c.params)} for c in self.calls],
            "kernels": {k: {"config": v.config, "source": v.source} for k, v in self.kernels.items()},
            "plan": {"slot_of": self.plan.slot_of, "slot_bytes": self.plan.slot_bytes,
                     "naive_bytes": self.plan.naive_bytes},
            "stats": self.stats,
            "index_bounds": self.index_bounds,
        }
        with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as z:
            z.writestr("manifest.json", json.dumps(manifest, indent=1))
            with tempfile.TemporaryDirectory() as tmp:
                for key, k in self.kernels.items():
                    lib = os.path.join(tmp, f"{key}.so")
                    k.module.export_library(lib)
                    z.write(lib, f"kernels/{key}.so")
            for i, c in enumerate(self.calls):
                if c.params:
                    z.writestr(f"params/{i}.npz", _npz({f"p{j}": _numpy(p) for j, p in enumerate(c.params)}))
            if self.constants:
                z.writestr("constants.npz", _npz(self.constants))
        return path

    @classmethod
    def load(cls, path: str | Path) -> "CompiledModel":
        import tvm

        path = Path(path)
        try:
            z = zipfile.ZipFile(path)
        except (OSError, zipfile.BadZipFile) as e:
            raise ImportFormatError(f"{path}: not an akgpack ({e})") from None
        with z:
            try:
                manifest = json.loads(z.read("manifest.json"))
            except (KeyError, ValueError) as e:
                raise ImportFormatError(f"{path}: no readable manifest ({e})") from None
            if manifest.get("format") != PACK_FORMAT or manifest.get("version") != PACK_VERSION:
                raise ImportFormatError(f"{path}: not an akgpack version {PACK_VERSION}")
            tmp = tempfile.mkdtemp(prefix="akgpack-")
            kernels = {}
            for key, info in manifest["kernels"].items():
                lib = z.extract(f"kernels/{key}.so", tmp)
                kernels[key] = LoadedKernel(tvm.runtime.load_module(lib), info["config"], info["source"])
            calls = []
            for i, c in enumerate(manifest["calls"]):
                params = []
                if c["params"]:
                    with np.load(io.BytesIO(z.read(f"params/{i}.npz"))) as npz:
                        params = [npz[f"p{j}"] for j in range(c["params"])]
                calls.append(KernelCall(c["kernel"], c["name"], tuple(c["inputs"]), tuple(c["outputs"]), params))
            constants = {}
            if "constants.npz" in z.namelist():
                with np.load(io.BytesIO(z.read("constants.npz"))) as npz:
                    constants = {k: npz[k] for k in npz.files}
        specs = {s["name"]: _spec(s) for s in manifest["specs"]}
        plan = MemoryPlan(manifest["plan"]["slot_of"], manifest["plan"]["slot_bytes"], manifest["plan"]["naive_bytes"])
        return cls(manifest["name"], [_spec(s) for s in manifest["inputs"]], [_spec(s) for s in manifest["outputs"]],
                   specs, calls, kernels, constants, plan, manifest.get("stats", {}),
                   manifest.get("index_bounds", {}))


def check_index_bounds(name: str, a: np.ndarray, bound: int | None) -> None:
    """Indices out of range would make a kernel read outside its tensor: refuse them."""
    if bound is not None and a.size and (a.min() < 0 or a.max() >= bound):
        raise InputDataError(f"input {name} holds indices outside [0, {bound})")


def _spec_json(s: TensorSpec) -> dict:
    return {"name": s.name, "shape": list(s.shape), "dtype": s.dtype}


def _spec(d: dict) -> TensorSpec:
    return TensorSpec(d["name"], tuple(d["shape"]), d["dtype"])


def _numpy(a) -> np.ndarray:
    return a if isinstance(a, np.ndarray) else a.numpy()


def _npz(arrays: Mapping[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def compile_model(graph: Graph, target="cpu", db=None, progress=None) -> CompiledModel:
    """Partition a model into kernels, build each distinct kernel once (with its best tuned
    config from `db` when there is one) and plan the intermediate buffers."""
    from akg.compiler import build
    from akg.graph.compute.lower import lower_graph
    from akg.graph.interpreter import index_bounds
    from akg.graph.pipeline import plan_model
    from akg.target import get_target

    t0 = time.perf_counter()
    target = get_target(target)
    parts = plan_model(graph, target)
    pg = parts.graph
    specs = {v.name: TensorSpec(v.name, v.shape, v.dtype) for v in pg.values}
    built: dict[str, LoadedKernel] = {}
    calls = []
    for i, fk in enumerate(parts.kernels):
        key = fk.subgraph.workload_key
        if key not in built:
            kernel = build(fk.subgraph, target, db=db)
            built[key] = LoadedKernel(kernel.executable.mod, kernel.config.to_json(), kernel.config_source)
            if progress is not None:
                progress(i, len(parts.kernels), fk, kernel)
        params = list(lower_graph(fk.subgraph.graph).params.values())  # this call's own weights
        calls.append(KernelCall(key, fk.name, fk.inputs, fk.outputs, params))
    consts = {v.name: np.asarray(a) for v, a in pg.constants.items()}
    needed = {n for c in calls for n in c.inputs} | {v.name for v in pg.outputs}
    constants = {k: a for k, a in consts.items() if k in needed}
    outputs = [specs[v.name] for v in pg.outputs]
    plan = plan_memory(calls, specs, keep={s.name for s in outputs})
    stats = {"kernels": len(calls), "distinct_kernels": len(built), "compile_s": time.perf_counter() - t0,
             "tuned_kernels": sum(1 for k in built.values() if k.source.startswith("tuned"))}
    bounds = {v.name: b for v, b in index_bounds(pg).items() if v in set(pg.inputs)}
    return CompiledModel(graph.name, [specs[v.name] for v in pg.inputs], outputs, specs, calls, built,
                         constants, plan, stats, bounds)
