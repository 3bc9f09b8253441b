"""Reading an `.akgpack` (`CompiledModel.load`): the manifest checked for its types and
against itself, the weights and the kernel files read, every defect an ImportFormatError
that names the pack and what is wrong; and the model graph a pack may keep for checking."""

from __future__ import annotations

import io
import json
import math
import zipfile
import zlib
from pathlib import Path

import numpy as np

from akg.errors import ImportFormatError, InputError, UnsupportedError, one_line
from akg.runtime import (PACK_FORMAT, PACK_VERSION, REFERENCE_GRAPH, REFERENCE_WEIGHTS, V1_ARTIFACT_KIND, CompiledModel,
                         KernelCall, LoadedKernel, MemoryPlan, TensorSpec)


class PackReader:
    """An open .akgpack read for `CompiledModel.load`: every field of the manifest checked for its
    type and against the others (each value a call reads is defined before it, each output is
    made, the specs, the memory plan and the weights agree), then the weights and the kernels
    read. Every defect is an ImportFormatError that names the pack and what is wrong."""

    def __init__(self, path: Path, z: zipfile.ZipFile):
        self.path, self.z = path, z

    def error(self, what: str) -> ImportFormatError:
        return ImportFormatError(f"{self.path}: {what}")

    # --- members ---------------------------------------------------------------------------

    def read(self, member: str) -> bytes:
        try:
            return self.z.read(member)
        except KeyError:
            raise self.error(f"{member} is missing") from None
        except _ZIP_ERRORS as e:
            raise self.error(f"{member} is damaged ({one_line(e)})") from None

    def arrays(self, member: str) -> dict[str, np.ndarray]:
        data = self.read(member)
        try:
            npz = np.load(io.BytesIO(data), allow_pickle=False)
            if not isinstance(npz, np.lib.npyio.NpzFile):
                raise ValueError("a single array, not an .npz archive")
            with npz:
                return {k: npz[k] for k in npz.files}
        except (*_ZIP_ERRORS, KeyError) as e:
            raise self.error(f"{member} is not a readable .npz ({one_line(e)})") from None

    # --- the manifest's fields -------------------------------------------------------------

    def field(self, obj: dict, key: str, where: str, kind: str, default=None):
        """obj[key] (`default` where absent and not None), which must be of `kind` (`_KINDS`)."""
        if key not in obj:
            if default is not None:
                return default
            raise self.error(f"the manifest has no {where}{key}")
        value = obj[key]
        if not _KINDS[kind](value):
            raise self.error(f"the manifest's {where}{key} must be {kind}, not {_shown(value)}")
        return value

    def spec(self, d, where: str) -> TensorSpec:
        from akg.graph.types import DTYPES, MAX_ELEMENTS

        if type(d) is not dict:
            raise self.error(f"the manifest's {where} must be an object, not {_shown(d)}")
        name = self.field(d, "name", f"{where}.", "a string")
        shape = self.field(d, "shape", f"{where}.", "a list of sizes")
        dtype = self.field(d, "dtype", f"{where}.", "a string")
        if math.prod(shape) > MAX_ELEMENTS:
            raise self.error(f"the manifest's {where}.shape {shape} has more elements than an array can index")
        if dtype not in DTYPES:
            raise self.error(f"the manifest's {where}.dtype '{dtype}' is not a dtype akg knows")
        return TensorSpec(name, tuple(shape), dtype)

    def specs(self, manifest: dict, key: str) -> list[TensorSpec]:
        return [self.spec(d, f"{key}[{i}]") for i, d in enumerate(self.field(manifest, key, "", "a list"))]

    def manifest(self) -> dict:
        try:
            manifest = json.loads(self.read("manifest.json"))
        except ValueError as e:
            raise self.error(f"no readable manifest ({one_line(e)})") from None
        if type(manifest) is not dict:
            raise self.error(f"the manifest must be a JSON object, not {_shown(manifest)}")
        version = manifest.get("version")
        if manifest.get("format") != PACK_FORMAT or type(version) is not int or version not in (1, PACK_VERSION):
            raise self.error(f"not an akgpack version {PACK_VERSION}")
        return manifest

    def calls(self, manifest: dict) -> tuple[list[KernelCall], list[int]]:
        """The calls (their weights not read yet) and how many weight arrays each takes."""
        calls, counts = [], []
        for i, c in enumerate(self.field(manifest, "calls", "", "a list")):
            where = f"calls[{i}]."
            if type(c) is not dict:
                raise self.error(f"the manifest's calls[{i}] must be an object, not {_shown(c)}")
            calls.append(KernelCall(self.field(c, "kernel", where, "a string"),
                                    self.field(c, "name", where, "a string"),
                                    tuple(self.field(c, "inputs", where, "a list of names")),
                                    tuple(self.field(c, "outputs", where, "a list of names"))))
            counts.append(self.field(c, "params", where, "a count"))
        return calls, counts

    def plan(self, manifest: dict) -> MemoryPlan:
        plan = self.field(manifest, "plan", "", "an object")
        return MemoryPlan(self.field(plan, "slot_of", "plan.", "an object of counts"),
                          self.field(plan, "slot_bytes", "plan.", "a list of sizes"),
                          self.field(plan, "naive_bytes", "plan.", "a count"))

    # --- the whole model ---------------------------------------------------------------------

    def model(self, cls) -> CompiledModel:
        from akg.target import Artifact, get_backend

        manifest = self.manifest()
        version = manifest["version"]
        name = self.field(manifest, "name", "", "a string")
        inputs, outputs = self.specs(manifest, "inputs"), self.specs(manifest, "outputs")
        specs = {}
        for s in self.specs(manifest, "specs"):
            if s.name in specs:
                raise self.error(f"the manifest's specs list {s.name} twice")
            specs[s.name] = s
        (calls, counts), plan = self.calls(manifest), self.plan(manifest)
        kernels = self.field(manifest, "kernels", "", "an object")
        for key, info in kernels.items():
            if not key or key in (".", "..") or any(c in key for c in "/\\\0"):
                raise self.error(f"kernel key {key!r} is not a plain name")
            if type(info) is not dict:
                raise self.error(f"the manifest's kernels.{key} must be an object, not {_shown(info)}")
            self.field(info, "config", f"kernels.{key}.", "a string")
            self.field(info, "source", f"kernels.{key}.", "a string")
        bounds = self.field(manifest, "index_bounds", "", "an object of counts", {})
        stats = self.field(manifest, "stats", "", "an object", {})
        kind = self.field(manifest, "artifact_kind", "", "a string", V1_ARTIFACT_KIND)
        complex_io = frozenset(self.field(manifest, "complex_io", "", "a list of names", []))
        names = set(self.z.namelist())
        constants = self.arrays("constants.npz") if "constants.npz" in names else {}
        for key, a in constants.items():  # NumPy writes bfloat16 and float8 as raw bytes
            spec = specs.get(key)
            if a.dtype.kind == "V" and spec is not None and np.dtype(spec.dtype).itemsize == a.dtype.itemsize:
                constants[key] = a.view(np.dtype(spec.dtype))
        self.check(inputs, outputs, specs, calls, kernels, constants, plan, bounds, complex_io)
        for i, (c, count) in enumerate(zip(calls, counts)):
            if count:
                member = f"params/{i}.npz"
                if member not in names:
                    raise self.error(f"{member} is missing: call {i} ({c.name}) takes {count} weight array(s)")
                arrays = self.arrays(member)
                if sorted(arrays) != sorted(f"p{j}" for j in range(count)):
                    raise self.error(f"{member} holds {len(arrays)} weight array(s) ({', '.join(arrays) or 'none'}); "
                                     f"call {i} ({c.name}) takes {count} (p0..p{count - 1})")
                c.params = [arrays[f"p{j}"] for j in range(count)]
        backend = get_backend(kind)
        loaded = {}
        for key, info in kernels.items():
            data = self.read(f"kernels/{key}.so" if version == 1 else f"kernels/{key}")
            try:
                executable = backend.load(Artifact(kind, data))
            except (MemoryError, RecursionError, UnsupportedError):
                raise
            except Exception as e:  # noqa: BLE001  (TVM and the backends report a bad library as their own types)
                raise self.error(f"kernel {key} cannot be loaded by the {kind} backend ({one_line(e)})") from None
            loaded[key] = LoadedKernel(executable, info["config"], info["source"], artifact=data)
        return cls(name, inputs, outputs, specs, calls, loaded, constants, plan, stats, bounds, kind,
                   complex_io=complex_io)

    def check(self, inputs, outputs, specs, calls, kernels, constants, plan, bounds, complex_io) -> None:
        """The manifest's parts agree: names, specs, the order of the calls, the memory plan."""
        for what, group in (("input", inputs), ("output", outputs)):
            for s in group:
                if s.name not in specs:
                    raise self.error(f"{what} {s.name} has no entry in the manifest's specs")
                if specs[s.name] != s:
                    raise self.error(f"{what} {s.name} is {_typed(s)} in the manifest's {what}s but "
                                     f"{_typed(specs[s.name])} in its specs")
        given = {s.name: "a model input" for s in inputs}
        if len(given) < len(inputs):
            raise self.error("the manifest's inputs list a name twice")
        for key, a in constants.items():
            if key in given:
                raise self.error(f"constant {key} in constants.npz is also a model input")
            if key not in specs:
                raise self.error(f"constant {key} in constants.npz has no entry in the manifest's specs")
            s = specs[key]
            if a.shape != s.shape or a.dtype != np.dtype(s.dtype):
                raise self.error(f"constant {key} is {a.dtype}{list(a.shape)} in constants.npz but {_typed(s)} "
                                 f"in the manifest's specs")
            given[key] = "a constant"
        written, last_read = {}, {}
        for i, c in enumerate(calls):
            if c.kernel not in kernels:
                raise self.error(f"call {i} ({c.name}) runs kernel {c.kernel!r}, which the manifest's kernels "
                                 f"do not list")
            for n in c.inputs:
                if n not in given:
                    raise self.error(f"call {i} ({c.name}) reads {n}, which is no model input, constant or "
                                     f"output of an earlier call")
                last_read[n] = i
            for n in c.outputs:
                if n in given:
                    raise self.error(f"call {i} ({c.name}) writes {n}, which is {given[n]}")
                if n not in specs:
                    raise self.error(f"call {i} ({c.name}) writes {n}, which has no entry in the manifest's specs")
                written[n] = i
            given.update((n, f"written by call {i}") for n in c.outputs)
        for s in outputs:
            if s.name not in given:
                raise self.error(f"output {s.name} is no model input or constant, and no call computes it")
        for key in bounds:
            if key not in {s.name for s in inputs}:
                raise self.error(f"the manifest's index_bounds name {key}, which is not a model input")
        ends = {s.name for s in (*inputs, *outputs)}
        for key in complex_io:
            if key not in ends:
                raise self.error(f"the manifest's complex_io names {key}, which is no model input or output")
            s = specs[key]
            if s.dtype != "float32" or not s.shape or s.shape[-1] != 2:
                raise self.error(f"the manifest's complex_io names {key}, whose spec {_typed(s)} is not a complex64 "
                                 f"array as float32 pairs (float32[..., 2])")
        self.check_plan(plan, specs, written, last_read, {s.name for s in outputs})

    def check_plan(self, plan: MemoryPlan, specs, written, last_read, outputs) -> None:
        """Every value the plan places is an intermediate that fits its slot, and values sharing
        a slot are never alive at once (`plan_memory`'s promise, which the kernels rely on)."""
        spans: dict[int, list] = {}
        for name, slot in plan.slot_of.items():
            if name not in written or name in outputs:
                what = "a model output" if name in outputs else "written by no call"
                raise self.error(f"the manifest's memory plan places {name}, which is {what}")
            if slot >= len(plan.slot_bytes):
                raise self.error(f"the manifest's memory plan places {name} in slot {slot} of "
                                 f"{len(plan.slot_bytes)}")
            if specs[name].nbytes > plan.slot_bytes[slot]:
                raise self.error(f"the manifest's memory plan places {name} ({_typed(specs[name])}, "
                                 f"{specs[name].nbytes} bytes) in slot {slot} of {plan.slot_bytes[slot]} bytes")
            start = written[name]
            spans.setdefault(slot, []).append((start, max(start, last_read.get(name, start)), name))
        for slot, group in spans.items():
            group.sort()
            for (_, end, a), (start, _, b) in zip(group, group[1:]):
                if start <= end:
                    raise self.error(f"the manifest's memory plan puts {a} and {b} in slot {slot} while both "
                                     f"are alive")


# what reading a damaged member of a zip archive raises (KeyError: a missing one)
_ZIP_ERRORS = (zipfile.BadZipFile, zlib.error, OSError, EOFError, RuntimeError, NotImplementedError, ValueError)
_KINDS = {
    "a string": lambda v: type(v) is str,
    "a count": lambda v: type(v) is int and v >= 0,
    "a list": lambda v: type(v) is list,
    "an object": lambda v: type(v) is dict,
    "a list of names": lambda v: type(v) is list and all(type(n) is str for n in v),
    "a list of sizes": lambda v: type(v) is list and all(type(n) is int and n >= 0 for n in v),
    "an object of counts": lambda v: type(v) is dict and all(type(n) is int and n >= 0 for n in v.values()),
}


def _shown(value) -> str:
    """A JSON value as the manifest has it, shortened."""
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _typed(s: TensorSpec) -> str:
    return f"{s.dtype}{list(s.shape)}"


def read_reference(path: Path):
    """The model graph kept in an .akgpack (REFERENCE_GRAPH), or InputError saying why not."""
    from akg.errors import AkgError
    from akg.graph.io import parse_mir

    try:
        with zipfile.ZipFile(path) as z:
            names = set(z.namelist())
            if REFERENCE_GRAPH not in names:
                try:
                    missing = json.loads(z.read("manifest.json")).get("reference", {}).get("missing")
                except (KeyError, ValueError, AttributeError):
                    missing = None
                raise InputError(f"{path}: the pack carries no copy of its model's graph ("
                                 + (missing or "it was written by `akg compile --no-reference`, by an older "
                                    "akg, or from the Python API without setting `reference`") + ")")
            pack = PackReader(path, z)  # a missing, damaged or unreadable member: ImportFormatError
            text = pack.read(REFERENCE_GRAPH).decode()
            weights = pack.arrays(REFERENCE_WEIGHTS) if REFERENCE_WEIGHTS in names else {}
    except (OSError, zipfile.BadZipFile, UnicodeDecodeError, ValueError) as e:
        raise ImportFormatError(f"{path}: cannot read the pack's reference graph: {e}") from None
    try:
        return parse_mir(text, f"{path}:{REFERENCE_GRAPH}", weights=weights)
    except AkgError as e:
        raise ImportFormatError(f"{path}: the pack's reference graph is unreadable: {e}") from None
