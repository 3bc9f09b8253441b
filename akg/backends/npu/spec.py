"""The numbers of the NPU machine model, all in one frozen `NpuSpec`: a different chip is a
different spec, never a code change. Defaults are the "ascend910-like" machine of
docs/npu.md (public descriptions of the Ascend 910, taken as model parameters, not
measurements). `NPU_SPECS` holds the named presets; `NpuSpec.key()` is what a tuning record
is keyed by; `NpuSpec.roofline` gives the machine's cube-, vector- and GM-bound cycle limits
for an amount of work."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass, field

from akg.registry import Registry

KIB = 1024
MIB = 1024 * KIB

# the legal DMA paths and the engine (pipe) that moves each; a spec gives each its rate
PATH_PIPES: dict[str, str] = {
    "GM->L1": "MTE2",
    "GM->UB": "MTE2",
    "GM->L0A": "MTE2",
    "GM->L0B": "MTE2",
    "L1->L0A": "MTE1",
    "L1->L0B": "MTE1",
    "L1->UB": "MTE1",
    "UB->GM": "MTE3",
    "L0C->UB": "V",
}


@dataclass(frozen=True)
class Roofline:
    """Lower bounds, in cycles, on a kernel's run time from its cube work, its vector work and
    its global-memory traffic, each at the machine's full rate; `bound` is the largest."""

    cube: float
    vector: float
    gm: float

    @property
    def bound(self) -> float:
        return max(self.cube, self.vector, self.gm)

    @property
    def limit(self) -> str:
        """Which unit bounds the kernel: "cube", "vector" or "gm"."""
        return max((self.cube, "cube"), (self.vector, "vector"), (self.gm, "gm"))[1]

    def fraction(self, cycles: float) -> float:
        """How close a kernel that ran `cycles` is to the roofline (1.0: at the limit)."""
        return self.bound / cycles if cycles > 0 else 0.0


@dataclass(frozen=True)
class NpuSpec:
    """Every number of the NPU model. Sizes in bytes, rates in bytes per cycle, costs in
    cycles. `paths` maps each DMA path ("SRC->DST") to its rate per core; global-memory paths
    are also capped together by `gm_bandwidth` (HBM, bytes per second, shared by all cores) for
    the bytes that miss the shared L2 (`l2_bytes`), and by `l2_rate` (bytes per cycle, all
    cores together) for every GM byte."""

    name: str = "ascend910-like"
    cores: int = 32  # AI cores; each runs one block at a time, further blocks queue
    clock_hz: float = 1.0e9
    gm_bandwidth: float = 1.2e12  # HBM, bytes/s for all cores together
    # L2: a cache shared by all cores between them and HBM (0 bytes: none). Model parameters,
    # not measurements: the Ascend 910's public 32 MB, and 4x HBM's rate for all cores together
    l2_bytes: int = 32 * MIB
    l2_rate: float = 4800.0  # bytes/cycle for all cores together (every GM transfer passes it)
    # buffers per core
    l1_bytes: int = 1 * MIB
    l0a_bytes: int = 64 * KIB
    l0b_bytes: int = 64 * KIB
    l0c_bytes: int = 256 * KIB
    ub_bytes: int = 256 * KIB
    ub_usable_bytes: int = 248 * KIB  # the rest is reserved (stack, scalar spills)
    l1_alignment: int = 32
    ub_alignment: int = 32
    # cube: one fractal x fractal x fractal multiply-accumulate per cycle
    fractal: int = 16
    cube_in_dtypes: tuple[str, ...] = ("float16",)
    cube_out_dtypes: tuple[str, ...] = ("float32", "float16")
    # vector: one repeat per cycle over `vector_bytes`, in blocks of `vector_block_bytes`
    vector_bytes: int = 256
    vector_block_bytes: int = 32
    max_repeat: int = 255
    # DMA rates per path, bytes/cycle per core
    paths: tuple[tuple[str, float], ...] = (
        ("GM->L1", 64.0), ("GM->UB", 64.0), ("GM->L0A", 64.0), ("GM->L0B", 64.0),
        ("L1->L0A", 512.0), ("L1->L0B", 256.0), ("L1->UB", 128.0),
        ("L0C->UB", 256.0), ("UB->GM", 64.0),
    )
    # costs in cycles
    dma_latency: int = 20  # start of every DMA
    vector_issue: int = 10  # per vector instruction, before its repeats
    cube_issue: int = 10  # per mmad, before its fractals
    scalar_cycles: int = 1  # per scalar operation
    dispatch_cycles: int = 1  # the scalar unit issuing any instruction to its pipe
    loop_cycles: int = 2  # per loop iteration (counter, compare, branch)
    flag_cycles: int = 0  # set_flag / wait_flag on their pipe
    flag_ids: int = 8  # event ids per (src, dst) pipe pair
    queue_depth: int = 16  # instructions waiting per pipe before dispatch stalls

    _rates: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        rates = {path: float(rate) for path, rate in self.paths}
        for path, rate in rates.items():
            if path not in PATH_PIPES:
                raise ValueError(f"NpuSpec '{self.name}': unknown DMA path '{path}' "
                                 f"(paths: {', '.join(PATH_PIPES)})")
            if rate <= 0:
                raise ValueError(f"NpuSpec '{self.name}': path '{path}' needs a positive rate")
        if self.ub_usable_bytes > self.ub_bytes:
            raise ValueError(f"NpuSpec '{self.name}': usable UB exceeds the UB")
        if self.l2_bytes < 0 or self.l2_rate <= 0:
            raise ValueError(f"NpuSpec '{self.name}': the L2 needs l2_bytes >= 0 and a positive l2_rate")
        object.__setattr__(self, "_rates", rates)

    # --- derived numbers -----------------------------------------------------------------------

    @property
    def gm_bytes_per_cycle(self) -> float:
        """The shared global-memory cap in bytes per cycle."""
        return self.gm_bandwidth / self.clock_hz

    @property
    def fractal_macs(self) -> int:
        """Multiply-accumulates of one cube cycle (16^3 = 4096)."""
        return self.fractal ** 3

    def capacity(self, scope: str) -> int:
        """Bytes a program may allocate in `scope` per core (UB: the usable part; GM: 0,
        unbounded)."""
        return {"GM": 0, "L1": self.l1_bytes, "L0A": self.l0a_bytes, "L0B": self.l0b_bytes,
                "L0C": self.l0c_bytes, "UB": self.ub_usable_bytes}[str(scope)]

    def alignment(self, scope: str, itemsize: int) -> int:
        """Byte alignment of a buffer or operand address in `scope` holding elements of
        `itemsize` bytes: 32 B in L1 and UB, one fractal (16 x 16 elements) in L0A/L0B/L0C,
        one element in GM."""
        scope = str(scope)
        if scope in ("L0A", "L0B", "L0C"):
            return self.fractal * self.fractal * itemsize
        return {"GM": itemsize, "L1": self.l1_alignment, "UB": self.ub_alignment}[scope]

    def buffer_budget(self, scope: str, double_buffer: bool = False) -> int:
        """Bytes one tile set may use in `scope`: its capacity, halved under double buffering
        (ping and pong each get half)."""
        cap = self.capacity(scope)
        return cap // 2 if double_buffer else cap

    def rate(self, path: str) -> float | None:
        """Bytes per cycle per core of a DMA path ("GM->UB"), None where the spec has none."""
        return self._rates.get(path)

    def lanes(self, itemsize: int) -> int:
        """Vector lanes of one repeat for elements of `itemsize` bytes (fp16: 128)."""
        return self.vector_bytes // itemsize

    def block_elements(self, itemsize: int) -> int:
        """Elements in one 32-byte vector block (fp16: 16)."""
        return self.vector_block_bytes // itemsize

    def seconds(self, cycles: float) -> float:
        return cycles / self.clock_hz

    def roofline(self, cube_flops: float = 0.0, vector_bytes: float = 0.0, gm_bytes: float = 0.0,
                 *, cores: int | None = None, path_bytes: float | None = None) -> Roofline:
        """Cycle limits of an amount of work on `cores` cores (default: all): `cube_flops`
        (2 per multiply-accumulate) at one fractal per cycle per core, `vector_bytes` (vector
        repeats times `vector_bytes` for masked work) at one repeat per cycle per core, and
        `gm_bytes` (HBM bytes: for the ideal bound, inputs read once and outputs written once)
        at the shared HBM cap or the cores' own GM paths (in plus out), whichever is lower.
        `path_bytes` (default `gm_bytes`) are all bytes over the GM paths, L2 hits included:
        they are bounded by the paths and the L2 rate; `gm` is the larger of the two limits."""
        cores = self.cores if cores is None else cores
        per_core_gm = max((self.rate(p) or 0.0) for p in ("GM->L1", "GM->UB")) + (self.rate("UB->GM") or 0.0)
        gm_rate = min(self.gm_bytes_per_cycle, cores * per_core_gm)
        gm = gm_bytes / gm_rate if gm_rate > 0 else math.inf
        if path_bytes is not None:
            path_rate = min(self.l2_rate, cores * per_core_gm)
            gm = max(gm, path_bytes / path_rate if path_rate > 0 else math.inf)
        return Roofline(cube=cube_flops / (2.0 * self.fractal_macs * cores),
                        vector=vector_bytes / (float(self.vector_bytes) * cores), gm=gm)

    # --- identity ------------------------------------------------------------------------------

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}

    def to_json(self) -> str:
        """Canonical JSON (sorted keys, no spaces) of every number."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> NpuSpec:
        data = json.loads(text)
        for name in ("cube_in_dtypes", "cube_out_dtypes"):
            data[name] = tuple(data[name])
        data["paths"] = tuple((path, float(rate)) for path, rate in data["paths"])
        return cls(**data)

    def key(self) -> str:
        """Stable identity for tuning records: the name and a digest of every number, so two
        specs that differ in any number never share records."""
        return f"{self.name}-{hashlib.sha256(self.to_json().encode()).hexdigest()[:12]}"


NPU_SPECS: Registry[NpuSpec] = Registry("NPU spec")


def register_spec(spec: NpuSpec, *, replace: bool = False) -> NpuSpec:
    return NPU_SPECS.register(spec.name, spec, replace=replace)


def get_spec(name: str = "ascend910-like") -> NpuSpec:
    """A named preset (MissingRuleError lists the known names)."""
    return NPU_SPECS.get(name)


register_spec(NpuSpec())
# The inference chip of the same family: 2 AI cores, LPDDR4X at about 48 GB/s, an 8 MB L2 at
# 4x that rate (model parameters, as above).
register_spec(NpuSpec(name="ascend310-like", cores=2, gm_bandwidth=48e9, l2_bytes=8 * MIB, l2_rate=192.0))
