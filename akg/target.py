"""Targets as plug-ins. A target kind is data (memory levels, vector and thread limits,
capability flags) plus three hooks that its own files provide: a mapping recipe and knob
space (`schedules/<kind>.py`), lowering hooks and a backend that compiles TIR into an
`Artifact` and measures it (`akg/backends/<kind>/`). Shared code only ever sees the classes
of this module; it never names a kind.

Plug-ins are found, not listed: every subpackage of `akg.backends`, and every entry point in
the `akg.targets` group of an installed distribution, is imported once by `load_plugins`, and
registers its targets in `TARGETS` and its backend in `BACKENDS`. A test or a user may also
register a target of its own at run time (`register_target`)."""

from __future__ import annotations

import abc
import importlib
import logging
import pkgutil
from dataclasses import dataclass
from typing import Callable, ClassVar, Sequence

import numpy as np

from akg.errors import ScheduleError, UnknownTargetError
from akg.registry import Registry

log = logging.getLogger(__name__)

# --- capabilities ------------------------------------------------------------------------------

VECTOR = "vector"  # vector loops (SIMD lanes)
UNROLL = "unroll"  # unrolled loops
PARALLEL = "parallel"  # outer loops run on several cores
THREADS = "threads"  # loops mapped to blocks / threads (GPU)
REASSOCIATE = "reassociate"  # floating-point sums may be reordered (vector reductions)
PACK = "pack"  # operand panels copied into a blocked local layout
FAST_MATH = "fast_math"  # vectorisable straight-line exp/erf/tanh/sigmoid
STREAM = "stream"  # outputs written with streaming (non-temporal) stores, past the caches
STREAM_ATTR = "akg.stream_stores"  # the PrimFunc attribute by which astgen asks the backend for them


@dataclass(frozen=True)
class MemoryLevel:
    """One level of a target's memory: its name (what a `promote` or `tile` step names), its
    size in bytes (0: unbounded), the alignment of buffers in it, and who addresses it
    ("device": every core; "core": one core's; "thread": one thread's registers)."""

    name: str
    bytes: int = 0
    alignment: int = 1
    scope: str = "device"


@dataclass(frozen=True)
class Target(abc.ABC):
    """A hardware description. Subclasses (one per kind, in the kind's own files) add their
    numbers as fields and override the hooks."""

    kind: str
    cores: int = 1
    vector_bits: int = 0
    max_threads: int = 1
    memory: tuple[MemoryLevel, ...] = ()
    capabilities: frozenset[str] = frozenset()

    cost_unit: ClassVar[str] = "s"  # what `Backend.measure` returns (seconds, or cycles)
    # a strided padded pool reads its padded input in phases of its columns (`lower_graph`),
    # so that a vector along its output row loads each tap contiguously; False for a target
    # whose vector copies cannot stride over the input to build the phases
    window_phases: ClassVar[bool] = True
    # 3x3 convs that fit are run as Winograd F(2x2, 3x3) (`akg.graph.winograd`; needs
    # `vector_lanes`): the CPU, where the products' vectors run along rows of tiles
    winograd: ClassVar[bool] = False
    # a mean and a centred second moment of one tensor (layer norms, batch norms) are computed
    # from one read (`akg.graph.moments`, in `lower_graph`): for a target whose lowering runs
    # sibling reductions in one loop (the CPU's); elsewhere they would only add a shift
    one_read_moments: ClassVar[bool] = False

    @property
    def key(self) -> str:
        """What changes generated code; part of every tuning record's identity."""
        return self.kind

    def __str__(self) -> str:
        return self.key

    def has(self, capability: str) -> bool:
        return capability in self.capabilities

    def require(self, capability: str, step: str) -> None:
        """ScheduleError naming the capability when a config step needs what this lacks."""
        if capability not in self.capabilities:
            raise ScheduleError(f"step '{step}' needs capability '{capability}', which target '{self.key}' lacks")

    def level(self, name: str) -> MemoryLevel:
        for level in self.memory:
            if level.name == name:
                return level
        raise ScheduleError(f"target '{self.key}' has no memory level '{name}' "
                            f"(levels: {', '.join(m.name for m in self.memory) or 'none'})")

    def vector_lanes(self, dtype: str) -> int:
        return max(1, self.vector_bits // (8 * np.dtype(dtype).itemsize))

    def weight_panel(self, dtype: str, columns: int) -> int | None:
        """Columns per panel when a constant matmul weight is stored in panels
        (`akg.graph.layout`), or None to leave weights as they are."""
        return None

    # --- plug-in hooks -------------------------------------------------------------------------

    @abc.abstractmethod
    def recipe(self):
        """The `akg.schedules.recipe.Recipe` of this kind: its mapping and knob space
        (`schedules/<kind>.py`)."""

    @abc.abstractmethod
    def backend(self) -> Backend:
        """The backend of this kind (`akg/backends/<kind>/`)."""

    def lowering(self, config):
        """The `akg.polyhedral.astgen.LoweringHooks` for this target under `config` (what the
        TIR generator emits: fences, local allocations, vector reductions); None: plain TIR."""
        return None


# --- backends ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Artifact:
    """A compiled kernel as bytes that can cross a process or a network: `kind` names the
    backend that loads it (`BACKENDS`)."""

    kind: str
    data: bytes
    entry: str = "main"


@dataclass(frozen=True)
class LinkProgram:
    """A whole model's kernel calls on a static memory plan, as `Backend.link` gets it.

    Tensors are numbered in one sequence: the model's `inputs` first, then the `weights`
    (constant arrays, bound once), then the `outputs` (what the linked callable returns,
    each written by a kernel), then the `temps`: intermediate values at a byte offset in
    one workspace of `workspace_bytes` (offsets are multiples of `alignment`; values whose
    lifetimes do not overlap share bytes). `calls` are (kernel index, tensor numbers in the
    kernel's argument order: inputs, parameters, outputs), run in order."""

    inputs: tuple[tuple[tuple[int, ...], str], ...]  # (shape, dtype)
    weights: tuple[np.ndarray, ...]
    outputs: tuple[tuple[tuple[int, ...], str], ...]
    temps: tuple[tuple[tuple[int, ...], str, int], ...]  # (shape, dtype, byte offset)
    workspace_bytes: int
    calls: tuple[tuple[int, tuple[int, ...]], ...]
    alignment: int = 64

    def tensor(self, number: int) -> tuple[str, int]:
        """('input' | 'weight' | 'output' | 'temp', index within that group) of a tensor number."""
        for group, items in (("input", self.inputs), ("weight", self.weights), ("output", self.outputs),
                             ("temp", self.temps)):
            if number < len(items):
                return group, number
            number -= len(items)
        raise IndexError("tensor number out of range")


class Backend(abc.ABC):
    """TIR -> something that runs, and running it: compile, export/load as an Artifact,
    device memory, calls and timing. Arguments are in kernel order (inputs, parameters,
    outputs) as the backend's own device tensors."""

    artifact_kind: ClassVar[str]
    # the `source` kind that is the kernel's generated source code (C of a GPU kernel), which
    # `akg compile --show-source` prints instead of the TIR; None: the TIR is the source
    source_kind: ClassVar[str | None] = None

    @abc.abstractmethod
    def compile(self, func, target: Target, *, reciprocal: bool = True):
        """An executable of the PrimFunc (LoweringError when the target's compiler fails)."""

    @abc.abstractmethod
    def export(self, executable) -> Artifact: ...

    @abc.abstractmethod
    def load(self, artifact: Artifact):
        """An executable from an artifact of this backend's kind."""

    def source(self, executable, kind: str = "asm") -> str:
        """Generated code of an executable (backend-specific kinds; "" if none)."""
        return ""

    @abc.abstractmethod
    def entry(self, executable) -> Callable:
        """The kernel function: call it with device tensors in kernel order."""

    @abc.abstractmethod
    def to_device(self, array: np.ndarray): ...

    @abc.abstractmethod
    def empty(self, shape: Sequence[int], dtype: str): ...

    def view(self, arena, shape: Sequence[int], dtype: str):
        """A tensor of `shape` over the start of `arena` (a 1-d uint8 buffer from `empty`)."""
        raise NotImplementedError(f"{type(self).__name__} has no buffer views")

    @abc.abstractmethod
    def to_numpy(self, tensor) -> np.ndarray: ...

    @abc.abstractmethod
    def measure(self, executable, tensors: Sequence, *, number: int, repeat: int) -> list[float]:
        """`repeat` costs of the kernel on `tensors`, each the mean of `number` calls, in the
        target's `cost_unit`."""

    def link(self, executables: Sequence, program: LinkProgram) -> Callable | None:
        """Optional: the whole model as one callable, `f(inputs: list[np.ndarray]) ->
        list[np.ndarray]` (C-contiguous inputs of the program's shapes and dtypes, already
        checked; fresh output arrays that alias neither the inputs nor each other, and that no
        later call reuses), that runs `program.calls` over `executables` (the kernels, indexed
        by the calls) without going back to Python per kernel. It must be safe to call from
        several threads at once. None (the default): this backend has no linker, and
        `akg.runtime.CompiledModel` calls the kernels one by one through `entry`."""

    def run(self, executable, arrays: Sequence[np.ndarray], outputs: Sequence[tuple]) -> list[np.ndarray]:
        """Call once on NumPy arrays; `outputs` are (shape, dtype) pairs. Returns the outputs."""
        tensors = [self.to_device(a) for a in arrays]
        outs = [self.empty(shape, dtype) for shape, dtype in outputs]
        self.entry(executable)(*tensors, *outs)
        return [self.to_numpy(o) for o in outs]


class HostArrays:
    """Device memory for a backend whose tensors are NumPy arrays in host memory (a simulator,
    an interpreter): mix it in before Backend."""

    def to_device(self, array: np.ndarray) -> np.ndarray:
        return np.array(array, order="C", copy=True)

    def empty(self, shape: Sequence[int], dtype: str) -> np.ndarray:
        return np.zeros(tuple(shape), dtype)

    def view(self, arena: np.ndarray, shape: Sequence[int], dtype: str) -> np.ndarray:
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        return arena[:nbytes].view(dtype).reshape(tuple(shape))

    def to_numpy(self, tensor: np.ndarray) -> np.ndarray:
        return np.array(tensor, copy=True)


# --- registries --------------------------------------------------------------------------------


def _unknown_target(name: str, known: list[str]) -> Exception:
    return UnknownTargetError(f"unknown target '{name}' (known: {', '.join(known)})")


TARGETS: Registry[Callable[[], Target]] = Registry("target", _unknown_target)
BACKENDS: Registry[Backend] = Registry("backend for artifacts of kind")

_PLUGINS_LOADED = False


def register_target(name: str, factory: Callable[[], Target], *, replace: bool = False) -> None:
    """Make `get_target(name)` return `factory()` (a target class or a function)."""
    TARGETS.register(name, factory, replace=replace)


def register_backend(backend: Backend, *, replace: bool = False) -> Backend:
    return BACKENDS.register(backend.artifact_kind, backend, replace=replace)


def load_plugins() -> None:
    """Import every target plug-in once: the subpackages of `akg.backends`, then the
    `akg.targets` entry points of installed distributions."""
    global _PLUGINS_LOADED
    if _PLUGINS_LOADED:
        return
    _PLUGINS_LOADED = True
    package = importlib.import_module("akg.backends")
    for info in pkgutil.iter_modules(package.__path__):
        if info.ispkg:
            importlib.import_module(f"{package.__name__}.{info.name}")
    try:
        from importlib.metadata import entry_points

        for ep in entry_points(group="akg.targets"):
            try:
                ep.load()
            except Exception as e:  # noqa: BLE001  (a broken third-party plug-in must not stop akg)
                log.warning("target plug-in %s failed to load: %s", ep.name, e)
    except ImportError:  # pragma: no cover
        pass


def get_target(target: "str | Target") -> Target:
    """A Target object from a name ('cpu') or a Target; UnknownTargetError lists the known."""
    if isinstance(target, Target):
        return target
    load_plugins()
    return TARGETS.get(str(target).lower())()


def get_backend(kind: str) -> Backend:
    """The backend that loads artifacts of `kind`."""
    load_plugins()
    return BACKENDS.get(kind)
