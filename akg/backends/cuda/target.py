"""The `cuda` target: one GPU spec (`spec.GpuSpec`) as a target. Its memory levels are the
GPU's global memory, a block's shared memory and a thread's registers; its capability is
mapping loops to blocks and threads; its key carries the spec's, so tuning records of two
GPUs never mix. `cuda-emu` is the same target whose kernels run on the host CPU (block and
thread indices as serial loops, `emulate.py`): the same recipe, mapping and TIR, checked
against the reference on any machine."""

from __future__ import annotations

from dataclasses import dataclass

from akg.backends.cuda.spec import SPEC_DEFAULT, GpuSpec, get_spec
from akg.target import THREADS, UNROLL, MemoryLevel, Target

KIND = "cuda"
EMU_KIND = "cuda-emu"
ARTIFACT_KIND = "cuda-cubin"
EMU_ARTIFACT_KIND = "cuda-emu-llvm"
GLOBAL, SHARED, REGISTERS = "global", "shared", "registers"


@dataclass(frozen=True)
class CudaTarget(Target):
    """A CUDA GPU of spec `spec_name` (a key of `spec.GPU_SPECS`), or of the `GpuSpec` given
    as `gpu` (a GPU that is no preset)."""

    kind: str = KIND
    spec_name: str = SPEC_DEFAULT
    gpu: GpuSpec | None = None

    def __post_init__(self):
        spec = self.spec
        object.__setattr__(self, "cores", spec.sms)
        object.__setattr__(self, "max_threads", spec.max_threads_per_block)
        if not self.memory:
            object.__setattr__(self, "memory", (
                MemoryLevel(GLOBAL, 0, 256, "device"),
                MemoryLevel(SHARED, spec.shared_per_block, 16, "core"),
                MemoryLevel(REGISTERS, spec.registers_per_thread * 4, 4, "thread"),
            ))
        if not self.capabilities:
            object.__setattr__(self, "capabilities", frozenset({THREADS, UNROLL}))

    @property
    def spec(self) -> GpuSpec:
        return self.gpu if self.gpu is not None else get_spec(self.spec_name)

    @property
    def arch(self) -> str:
        return self.spec.arch

    @property
    def key(self) -> str:
        return f"{self.kind}-{self.spec.key()}"

    def recipe(self):
        from akg.schedules.cuda import CudaRecipe

        return CudaRecipe(self)

    def backend(self):
        from akg.target import get_backend

        return get_backend(ARTIFACT_KIND)

    # the reduction trees' intermediates (`schedules/cuda_reduce.py`): memory -> (scope, trailing
    # dims kept[, exchange]): a thread's partial in a register, a tree level as one [threads]
    # array per block, a warp level in a register read across lanes by `__shfl_down_sync`
    scratch_scopes = {"local": ("local", 0), "shared": ("shared", 1), "warp": ("local", 0, "shuffle"),
                      "tile": ("shared", 1),  # a reduction's operand tile (`cuda_shared.py`): [F] per block
                      # a thread's accumulators (`cuda_registers.py`): dims kept per output axis,
                      # its points (a local array indexed by constants once unrolled: registers)
                      "acc": ("local", 1)}

    def lowering(self, config):
        from akg.polyhedral.astgen import LoweringHooks

        from akg.schedules.cuda import MAPPED_MARKS
        from akg.schedules.cuda_reduce import scratch_memory
        from akg.schedules.cuda_registers import accumulator_axes
        from akg.schedules.cuda_shared import tile_memory

        def scratch(name: str):
            axes = accumulator_axes(name)
            if axes:
                scope, per_axis = self.scratch_scopes["acc"]
                return scope, per_axis * axes
            memory = scratch_memory(name) or tile_memory(name)
            if not memory:
                return None
            scope = self.scratch_scopes[memory]
            return scope[:2] + (_shuffle_down,) if scope[2:] == ("shuffle",) else scope

        # CUDA's own expf/erff/tanhf, not the CPU's vectorisable expansions
        return LoweringHooks(keep_marks=MAPPED_MARKS, fast_math=False, scratch=scratch)

    def tvm_target(self):
        import tvm

        return tvm.target.Target({"kind": "cuda", "arch": self.arch})


@dataclass(frozen=True)
class CudaEmuTarget(CudaTarget):
    """The CUDA target with kernels run on the host: same mapping, emulated launch."""

    kind: str = EMU_KIND
    # on the host: a thread's partials stay one per thread (indexed by the thread, so that
    # they survive the end of the serial thread loop at a barrier); a tree level one per block
    scratch_scopes = {"local": ("global", 1), "shared": ("global", 1), "warp": ("global", 1), "tile": ("global", 1),
                      "acc": ("global", 2)}  # accumulators: per block, the threads' and their points' dims

    def backend(self):
        from akg.target import get_backend

        return get_backend(EMU_ARTIFACT_KIND)


def _shuffle_down(value, delta: int):
    """Lane + delta's value of a register, every lane of the warp taking part."""
    from tvm import tirx

    return tirx.op.tvm_warp_shuffle_down(tirx.const(0xFFFFFFFF, "uint32"), value, delta, 32, 32)


def cuda_target(spec_name: str = SPEC_DEFAULT) -> CudaTarget:
    return CudaTarget(spec_name=spec_name)


def cuda_emu_target(spec_name: str = SPEC_DEFAULT) -> CudaEmuTarget:
    return CudaEmuTarget(spec_name=spec_name)
