"""The NPU model: a DaVinci-style NPU (public Ascend AI Core architecture) that akg generates
programs for and simulates, since no real one is reachable. Every number of the machine is
one `spec.NpuSpec`; `isa` is the instruction set a backend emits (typed values with a
printable listing); `layout` converts matrices to and from the cube's fractal layouts;
`check.check_program` rejects a program that breaks a static rule (capacity, alignment,
paths, bounds) before it runs; `sim.simulate` executes it in NumPy and counts its cycles with
a pipe model, detecting races. Reports say "npu-sim": nothing here is real hardware.

Registers the target `npu` (the default spec), `npu:<spec>` for each preset, and the backend
of artifacts of kind "npu-sim". Importing it stays cheap: the target, backend and recipe
modules import the simulator and islpy only when used. See docs/npu.md."""

from functools import partial

from akg.target import register_backend, register_target


def _register() -> None:
    from akg.backends.npu.backend import NpuBackend
    from akg.backends.npu.spec import NPU_SPECS
    from akg.backends.npu.target import npu_target

    register_target("npu", npu_target, replace=True)
    for name in list(NPU_SPECS):
        register_target(f"npu:{name}", partial(npu_target, name), replace=True)
    register_backend(NpuBackend(), replace=True)


_register()
