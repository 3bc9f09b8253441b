"""The `npu` target: a DaVinci-style NPU (the `NpuSpec` machine) whose kernels run in the
bundled simulator ("npu-sim"). Its memory levels are the spec's buffers (GM, L1, L0A, L0B,
L0C, UB), its key carries the spec's key so tuning records of two specs never mix, and its
cost unit is simulated cycles."""

from __future__ import annotations

from dataclasses import dataclass, field

from akg.target import PARALLEL, VECTOR, MemoryLevel, Target

KIND = "npu"
ARTIFACT_KIND = "npu-sim"
SPEC_DEFAULT = "ascend910-like"


def _levels(spec) -> tuple[MemoryLevel, ...]:
    frac = spec.fractal * spec.fractal * 2  # one fp16 fractal
    return (
        MemoryLevel("GM", 0, 32, "device"),
        MemoryLevel("L1", spec.l1_bytes, spec.l1_alignment, "core"),
        MemoryLevel("L0A", spec.l0a_bytes, frac, "core"),
        MemoryLevel("L0B", spec.l0b_bytes, frac, "core"),
        MemoryLevel("L0C", spec.l0c_bytes, frac, "core"),
        MemoryLevel("UB", spec.ub_usable_bytes, spec.ub_alignment, "core"),
    )


@dataclass(frozen=True)
class NpuTarget(Target):
    """One NPU spec as a target: cores are AI cores, the vector unit is 256 bytes wide, the
    memory levels are the spec's buffers."""

    kind: str = KIND
    spec_name: str = SPEC_DEFAULT
    spec_json: str = field(default="", compare=False, repr=False)

    cost_unit = "cycles"
    window_phases = False  # the vector unit's copies do not stride over the input (`Target.window_phases`)

    def __post_init__(self):
        spec = self.spec
        object.__setattr__(self, "cores", spec.cores)
        object.__setattr__(self, "vector_bits", spec.vector_bytes * 8)
        if not self.memory:
            object.__setattr__(self, "memory", _levels(spec))
        if not self.capabilities:
            object.__setattr__(self, "capabilities", frozenset({PARALLEL, VECTOR}))

    @property
    def spec(self):
        from akg.backends.npu.spec import NpuSpec, get_spec

        if self.spec_json:
            return NpuSpec.from_json(self.spec_json)
        return get_spec(self.spec_name)

    @property
    def key(self) -> str:
        return f"{KIND}-sim-{self.spec.key()}"  # "npu-sim-...": a simulated chip, never hardware

    def recipe(self):
        from akg.schedules.npu import NpuRecipe

        return NpuRecipe(self)

    def backend(self):
        from akg.target import get_backend

        return get_backend(ARTIFACT_KIND)

    def lowering(self, config):
        from akg.polyhedral.astgen import LoweringHooks

        from akg.schedules.npu import MARK_GRID, MARK_PAR, MARK_TILE

        return LoweringHooks(keep_marks=(MARK_TILE, MARK_PAR, MARK_GRID), fast_math=False,
                             nan_extrema=False)  # its vector max and min propagate NaN


def npu_target(spec_name: str = SPEC_DEFAULT) -> NpuTarget:
    return NpuTarget(spec_name=spec_name)
