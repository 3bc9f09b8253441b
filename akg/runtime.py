"""CompiledModel: a model's kernels, called in order on a static memory plan through their
target's backend; and the `.akgpack` artifact that holds it all (kernels, plan, weights)
for `akg run` without recompiling. `akg.compiler.compile_model` makes one."""

from __future__ import annotations

import io
import json
import logging
import math
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from akg.errors import AkgError, ImportFormatError, InputDataError, InputError, one_line

log = logging.getLogger(__name__)

PACK_FORMAT = "akgpack"
PACK_VERSION = 2  # 2: kernels are artifacts of the kind the manifest names
V1_ARTIFACT_KIND = "cpu-llvm-so"  # version 1 packs held only the CPU backend's shared libraries
# The model's own graph, kept in the pack (optional, any version) so that a pack's outputs can
# be checked against the reference interpreter (`akg run PACK --check`) without the model file.
REFERENCE_GRAPH = "reference/model.mir"
REFERENCE_WEIGHTS = "reference/weights.npz"


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
    params: list = field(default_factory=list)  # NumPy arrays
    device_params: list | None = field(default=None, repr=False)  # the backend's copies, made on first use


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

    executable: object  # what the backend compiled or loaded
    config: str = ""
    source: str = "default"
    entry: object = field(default=None, repr=False)  # the kernel function, looked up on first call
    func: object = field(default=None, repr=False)  # its TIR PrimFunc when compiled here (not from a pack)
    # the library bytes it was loaded from (a pack's), written back as they are by `save`: a
    # loaded library cannot be exported again
    artifact: bytes | None = field(default=None, repr=False)


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
    artifact_kind: str = V1_ARTIFACT_KIND  # the backend that runs the kernels (`akg.target.BACKENDS`)
    reference: object = field(default=None, repr=False)  # the model's Graph, saved with the pack if set
    use_driver: bool = True  # call through the backend's linked driver when it has one
    # complex64 inputs/outputs: float32 (..., 2) pairs inside (akg.graph.complex), complex64 views here
    complex_io: frozenset = frozenset()
    _slots: list | None = field(default=None, repr=False)
    _driver: object = field(default=None, repr=False)
    _link_outputs: list | None = field(default=None, repr=False)
    _link_failed: bool = field(default=False, repr=False)
    _device_constants: dict | None = field(default=None, repr=False)
    _pack: Path | None = field(default=None, repr=False)  # the .akgpack this was loaded from
    _plain: tuple | None = field(default=None, repr=False)  # (names, shapes, dtypes) for `_bind`'s fast path
    _output_names: list = field(default_factory=list, repr=False)
    # NumPy inputs straight to the linked driver (`_direct_call`); False: not made yet
    _direct: object = field(default=False, init=False, repr=False)

    def __post_init__(self):
        self._output_names = [s.name for s in self.outputs]

    def random_inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Deterministic random inputs (index inputs within their bounds)."""
        from akg.graph.interpreter import random_array
        from akg.graph.types import TensorType

        rng = np.random.default_rng(seed)
        return {s.name: random_array(TensorType(s.shape[:-1], "complex64") if s.name in self.complex_io
                                     else TensorType(s.shape, s.dtype), rng, self.index_bounds.get(s.name))
                for s in self.inputs}

    # --- running --------------------------------------------------------------------------

    def _bind(self, args, named) -> dict[str, np.ndarray]:
        if not (args and named):  # the common call: NumPy arrays of the right shapes and dtypes
            given = self._plain_given(args, named)
            if given is not None:
                return dict(zip(self._plain[0], given))
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
            if s.name in self.complex_io:  # complex64 in, its (re, im) float32 pairs to the kernels
                if a.dtype != np.complex64 or (*a.shape, 2) != tuple(s.shape):
                    raise InputDataError(f"input {s.name} must be complex64{list(s.shape[:-1])}, "
                                         f"got {a.dtype}{list(a.shape)}")
                out[s.name] = np.ascontiguousarray(a).view(np.float32).reshape(s.shape)
                continue
            if a.shape != s.shape or a.dtype != np.dtype(s.dtype):
                raise InputDataError(f"input {s.name} must be {s.dtype}{list(s.shape)}, got {a.dtype}{list(a.shape)}")
            check_index_bounds(s.name, a, self.index_bounds.get(s.name))
            out[s.name] = a
        return out

    def _plain_inputs(self) -> tuple:
        """The input names, shapes and dtypes `_bind` checks arrays against directly; no names
        when an input needs more (complex64 pairs, index bounds)."""
        if self.complex_io or any(s.name in self.index_bounds for s in self.inputs):
            return (), (), ()
        return (tuple(s.name for s in self.inputs), tuple(tuple(s.shape) for s in self.inputs),
                tuple(np.dtype(s.dtype) for s in self.inputs))

    @property
    def backend(self):
        from akg.target import get_backend

        return get_backend(self.artifact_kind)

    def __call__(self, *args: np.ndarray, **named: np.ndarray) -> list[np.ndarray]:
        if bool(args) != bool(named) and self.use_driver:
            direct = self._direct
            if direct is False:
                direct = self._direct = self._direct_call()
            try:  # (inputs checked by then: what the kernels refuse is their spec, see `_refused`)
                results = direct(args, named) if direct is not None else None
            except (TypeError, ValueError) as e:
                raise self._refused(e) from e
            if results is not None:
                return results
        values = self._bind(args, named)
        driver = self.driver() if self.use_driver else None
        try:
            results = self.call_per_kernel(values) if driver is None else self._call_linked(driver, values)
        except (TypeError, ValueError) as e:
            raise self._refused(e) from e
        if not self.complex_io:
            return results
        return [np.ascontiguousarray(r).view(np.complex64).reshape(r.shape[:-1]) if s.name in self.complex_io
                else r for s, r in zip(self.outputs, results)]

    def _refused(self, e: Exception) -> Exception:
        """What to raise for `e`, a kernel refusing the arguments of its call (TVM checks every
        shape and dtype) after the model's inputs were checked against its specs: for a model
        loaded from a pack, an ImportFormatError (the manifest disagrees with the compiled
        kernels: it was altered); `e` itself for one compiled here (a bug)."""
        if self._pack is None:
            return e
        text = one_line(e)
        kernel = re.search(r"when calling: `([^(`]+)\(", text)  # TVM names the PrimFunc it checked
        which = f"kernel {kernel.group(1)}" if kernel else "kernels"
        return ImportFormatError(f"{self._pack}: the pack's manifest disagrees with its {which}: {text}")

    def _plain_given(self, args, named) -> tuple | None:
        """The inputs, in order, when every one is given (by position or by name, not both) as
        a NumPy array of its shape and dtype and needs no further check (`_plain_inputs`);
        else None."""
        if self._plain is None:
            self._plain = self._plain_inputs()
        names, shapes, dtypes = self._plain
        if not names:
            return None
        if named:
            if args or len(named) != len(names):
                return None
            args = tuple(named.get(n) for n in names)
        elif len(args) != len(names):
            return None
        for a, shape, dtype in zip(args, shapes, dtypes):
            if type(a) is not np.ndarray or a.shape != shape or a.dtype != dtype:
                return None
        return args

    def _direct_call(self):
        """The common call without a dict of values in between: the plain inputs
        (`_plain_given`) straight to the linked driver, whose outputs are the model's (else
        None: the general path). None where the model has no linked driver, complex64 or
        bounded index inputs, or outputs the driver does not compute."""
        if self._plain is None:
            self._plain = self._plain_inputs()
        if self.complex_io or not self._plain[0]:
            return None
        driver = self.driver()
        if driver is None or self._link_outputs != self._output_names:
            return None

        def direct(args, named):
            given = self._plain_given(args, named)
            return None if given is None else driver(given)

        return direct

    def driver(self):
        """The model linked into one callable by its backend (`Backend.link`), made on first
        use; None when the backend has no linker or linking failed (then every call goes
        kernel by kernel, `call_per_kernel`)."""
        if self._driver is None and not self._link_failed:
            if not self.calls:  # nothing to link: the outputs are inputs or constants
                self._link_failed = True
                return None
            self._require_memory()
            backend = self.backend
            keys = list(self.kernels)
            executables = [self.kernels[k].executable for k in keys]
            program, self._link_outputs = self.link_program({k: i for i, k in enumerate(keys)})
            try:
                self._driver = backend.link(executables, program)
            except AkgError as e:
                log.warning("model %s: %s; calling its kernels one by one", self.name, e)
                self._driver = None
            except (MemoryError, RecursionError):
                raise
            except Exception as e:  # a pack's kernel library without the kernel (TVM's own error types)
                if self._pack is None:
                    raise
                raise ImportFormatError(f"{self._pack}: the pack's kernels cannot be linked ({one_line(e)})") from e
            if self._driver is None:
                self._link_failed = True
        return self._driver

    def link_program(self, kernel_index: Mapping[str, int]):
        """The `akg.target.LinkProgram` of this model (kernels numbered by `kernel_index`),
        and the value names of its outputs, in order."""
        from akg.target import LinkProgram

        align = 64
        produced = {n for c in self.calls for n in c.outputs}
        outputs = list(dict.fromkeys(s.name for s in self.outputs if s.name in produced))
        offsets, top = [], 0
        for n in self.plan.slot_bytes:
            offsets.append(top)
            top += -(-max(n, 1) // align) * align
        temps, temp_of = [], {}
        for c in self.calls:
            for name in c.outputs:
                if name in outputs or name in temp_of:
                    continue
                spec = self.specs[name]
                if name in self.plan.slot_of:
                    offset = offsets[self.plan.slot_of[name]]
                else:  # a value outside the plan that no one returns: room of its own
                    offset, top = top, top + -(-max(spec.nbytes, 1) // align) * align
                temp_of[name] = len(temps)
                temps.append((tuple(spec.shape), spec.dtype, offset))
        weights, number = [], {}
        for i, s in enumerate(self.inputs):
            number[s.name] = i
        for name, a in self.constants.items():
            number[name] = len(self.inputs) + len(weights)
            weights.append(np.asarray(a))
        params = []
        for c in self.calls:
            ids = []
            for p in c.params:
                ids.append(len(self.inputs) + len(weights))
                weights.append(np.asarray(p))
            params.append(ids)
        first_out = len(self.inputs) + len(weights)
        for j, name in enumerate(outputs):
            number[name] = first_out + j
        for name, j in temp_of.items():
            number[name] = first_out + len(outputs) + j
        calls = tuple((kernel_index[c.kernel], (*(number[n] for n in c.inputs), *ids, *(number[n] for n in c.outputs)))
                      for c, ids in zip(self.calls, params))
        program = LinkProgram(tuple((tuple(s.shape), s.dtype) for s in self.inputs), tuple(weights),
                              tuple((tuple(self.specs[n].shape), self.specs[n].dtype) for n in outputs),
                              tuple(temps), top, calls, align)
        return program, outputs

    def _call_linked(self, driver, values: dict[str, np.ndarray]) -> list[np.ndarray]:
        results = driver([values[s.name] for s in self.inputs])
        if self._link_outputs == self._output_names:
            return results  # every output computed by a kernel, once, in order: the driver's arrays
        produced = dict(zip(self._link_outputs, results))
        result = []
        for s in self.outputs:
            a = produced.pop(s.name, None)
            if a is None:  # an input, a constant, or an output listed twice: a copy of its own
                source = values.get(s.name)
                if source is None:
                    source = self.constants.get(s.name)
                if source is None:
                    source = next(r for r, o in zip(result, self.outputs) if o.name == s.name)
                a = np.array(source, dtype=s.dtype, order="C", copy=True)
            result.append(a)
        return result

    def call_per_kernel(self, values: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Run the model kernel by kernel through the backend's device tensors (the path of
        backends without a linker; `values` are the bound inputs)."""
        backend = self.backend
        if self._device_constants is None:  # weights go to the device once, not per call
            self._device_constants = {name: backend.to_device(a) for name, a in self.constants.items()}
        env = dict(self._device_constants)
        env.update({name: backend.to_device(np.ascontiguousarray(a) if a.ndim else a) for name, a in values.items()})
        if self._slots is None:
            self._require_memory()
            self._slots = [backend.empty((max(n, 1),), "uint8") for n in self.plan.slot_bytes]
        for call in self.calls:
            kernel = self.kernels[call.kernel]
            outs = []
            for name in call.outputs:
                spec = self.specs[name]
                if name in self.plan.slot_of:
                    env[name] = backend.view(self._slots[self.plan.slot_of[name]], spec.shape, spec.dtype)
                else:
                    env[name] = backend.empty(spec.shape, spec.dtype)
                outs.append(env[name])
            if call.device_params is None:
                call.device_params = [backend.to_device(np.ascontiguousarray(p) if np.ndim(p) else np.asarray(p))
                                      for p in call.params]
            if kernel.entry is None:
                kernel.entry = self._entry(call.kernel)
            kernel.entry(*(env[n] for n in call.inputs), *call.device_params, *outs)
        return [backend.to_numpy(env[s.name]) for s in self.outputs]

    def _entry(self, key: str):
        """The function of kernel `key` (ImportFormatError where a pack's library lacks it)."""
        try:
            return self.backend.entry(self.kernels[key].executable)
        except (AttributeError, KeyError, TypeError, ValueError, RuntimeError) as e:
            if self._pack is None:
                raise
            raise ImportFormatError(f"{self._pack}: kernel {key} of the pack has no kernel function "
                                    f"({one_line(e)})") from e

    def _require_memory(self) -> None:
        """TooLargeError before the first call allocates anything this machine cannot hold
        (a pack compiled on a bigger machine): the memory plan's slots, the outputs outside it,
        the weights."""
        from akg.graph.memory import require_memory

        given = {s.name for s in self.inputs} | set(self.constants)
        outside = sum(math.prod(s.shape) * np.dtype(s.dtype).itemsize
                      for name, s in self.specs.items() if name not in self.plan.slot_of and name not in given)
        weights = sum(int(a.nbytes) for a in self.constants.values())
        require_memory(self.plan.peak_bytes + outside + weights, f"model '{self.name}'", "to run")

    # --- artifact -------------------------------------------------------------------------

    def reference_graph(self):
        """The model's graph kept with this model (`reference`, or read from the pack it was
        loaded from), for checking its outputs with the reference interpreter; InputError
        saying why when there is none."""
        if self.reference is not None:
            return self.reference
        if self._pack is None:
            raise InputError(f"compiled model {self.name} holds no reference graph (set its `reference` "
                             f"to the model's Graph)")
        from akg.pack_reader import read_reference

        self.reference = read_reference(self._pack)
        return self.reference

    def has_reference(self) -> bool:
        if self.reference is not None:
            return True
        if self._pack is None:
            return False
        try:
            with zipfile.ZipFile(self._pack) as z:
                return REFERENCE_GRAPH in z.namelist()
        except (OSError, zipfile.BadZipFile):
            return False

    def save(self, path: str | Path) -> Path:
        """Write a self-contained .akgpack (zip): manifest, kernel libraries, weights, and the
        model's graph when `reference` is set (or this model was loaded from a pack with one)."""
        from akg.graph.io import emit_mir

        path = Path(path)
        ref_text, ref_weights, ref_missing = None, {}, None
        if self.has_reference():
            try:
                ref_text, ref_weights = emit_mir(self.reference_graph(), weights_file=Path(REFERENCE_WEIGHTS).name)
            except Exception as e:  # noqa: BLE001  (the copy is optional: the pack still runs without it)
                ref_missing = f"its model's graph could not be written as .mir ({type(e).__name__}: {e})"
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
            "artifact_kind": self.artifact_kind,
            "complex_io": sorted(self.complex_io),
        }
        if ref_text is not None:
            manifest["reference"] = {"graph": REFERENCE_GRAPH, "weights": REFERENCE_WEIGHTS if ref_weights else None}
        elif ref_missing is not None:
            manifest["reference"] = {"missing": ref_missing}
        with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as z:
            z.writestr("manifest.json", json.dumps(manifest, indent=1))
            backend = self.backend
            for key, k in self.kernels.items():
                data = k.artifact if k.artifact is not None else backend.export(k.executable).data
                z.writestr(f"kernels/{key}", data)
            for i, c in enumerate(self.calls):
                if c.params:
                    z.writestr(f"params/{i}.npz", _npz({f"p{j}": np.asarray(p) for j, p in enumerate(c.params)}))
            if self.constants:
                z.writestr("constants.npz", _npz(self.constants))
            if ref_text is not None:
                z.writestr(REFERENCE_GRAPH, ref_text)
                if ref_weights:
                    z.writestr(REFERENCE_WEIGHTS, _npz(ref_weights))
        return path

    @classmethod
    def load(cls, path: str | Path) -> "CompiledModel":
        """The model an .akgpack holds, its manifest checked against itself, its weights and its
        kernel files; ImportFormatError naming the pack and the defect when anything is amiss."""
        from akg.pack_reader import PackReader

        path = Path(path)
        try:
            z = zipfile.ZipFile(path)
        except (OSError, EOFError, ValueError, zipfile.BadZipFile) as e:
            raise ImportFormatError(f"{path}: not an akgpack ({e})") from None
        with z:
            model = PackReader(path, z).model(cls)
        model._pack = path
        return model


def check_index_bounds(name: str, a: np.ndarray, bound: int | None) -> None:
    """Indices out of range would make a kernel read outside its tensor: refuse them."""
    if bound is not None and a.size and (a.min() < 0 or a.max() >= bound):
        raise InputDataError(f"input {name} holds indices outside [0, {bound})")


def _spec_json(s: TensorSpec) -> dict:
    return {"name": s.name, "shape": list(s.shape), "dtype": s.dtype}


def _npz(arrays: Mapping[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()
