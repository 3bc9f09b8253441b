"""Running CUDA kernels through the driver API (`akg/backends/cuda/driver.py`), without a GPU:

- the launch plan of every kernel of the kernel suite: each CUDA kernel parameter is one of
  the PrimFunc's buffers (inputs, parameters, outputs, of the program's shapes and dtypes) or
  a host-side intermediate, sized from the TIR; the plan survives the artifact round trip;
- the runner over a fake libcuda (`FakeCuda`: the C functions the driver calls, recording
  them; device memory is host memory, a kernel a Python function): allocations and copies,
  launch dims and argument pointers in order, the event arithmetic of `measure`, every
  CUresult turned into a CudaError naming the call and kernel, a sticky fault resetting the
  context, an executable for another arch refused, the tuner's verification and timing;
- the same calls through a C library with libcuda's signatures (`SHIM`, compiled here), so
  that the ctypes values cross a real C ABI (64-bit device pointers, `void**` parameters);
- `gpu`-marked tests that run the kernel suite and the issue's kernel families on a real GPU
  against the NumPy reference and time a kernel (skipped where nvidia-smi lists none; run
  them with `scripts/gpu_check.sh` on a machine with a GPU)."""

from __future__ import annotations

import ctypes
import json
import shutil
import types

import numpy as np
import pytest

import akg
from akg.backends.cuda import backend as cuda_backend
from akg.backends.cuda.bind import Launch
from akg.backends.cuda.driver import Driver, load_library
from akg.backends.cuda.errors import CudaError, GpuMismatchError, NoGpuError
from akg.backends.cuda.plan import LaunchPlan, PlanBuffer, kernel_params, launch_plan
from akg.errors import LoweringError
from akg.target import get_backend

import cuda_suite
from test_emulate import FAMILIES, _graph

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")

# --- the launch plan ----------------------------------------------------------------------------


def _plan_of(graph, target="cuda"):
    """(program, plan) of graph's default CUDA mapping: TVM's CUDA C, no nvcc."""
    from akg.compiler import pipeline_for

    pipeline = pipeline_for(graph, target)
    func, _ = pipeline.lower(pipeline.resolve(None))
    bound, source, launches = cuda_backend.generate(func, pipeline.target)
    kernels = cuda_backend.kernel_names(source)
    assert len(kernels) == len(launches)
    return pipeline.program, launch_plan(bound, source, kernels), source, kernels


def _check_plan(graph, kernel=None, seed: int = 0, inputs=None):
    program, plan, source, kernels = _plan_of(graph)
    expected = [(tuple(t.shape), t.dtype) for t in (*program.inputs, *program.params, *program.outputs)]
    assert [(b.shape, b.dtype) for b in plan.arguments] == expected
    params = kernel_params(source)
    from akg.backends.cuda.plan import _C_SIZES

    assert all(p.ctype in _C_SIZES for ps in params.values() for p in ps), "a C type of unknown size"
    assert len(plan.kernel_args) == len(kernels) == len(plan.dynamic_shared)
    for k, kernel in enumerate(kernels):
        assert len(plan.kernel_args[k]) == len(params[kernel])
        for index, p in zip(plan.kernel_args[k], params[kernel]):
            b = plan.buffer(index)
            assert p.pointer and p.name.removesuffix("_ptr") == b.name.replace(".", "_")
            assert b.nbytes == max(1, int(np.prod(b.shape))) * max(1, np.dtype(_host_dtype(b.dtype)).itemsize) \
                or b.nbytes == 0
    used = {i for args in plan.kernel_args for i in args}
    assert set(range(len(plan.arguments), len(plan.arguments) + len(plan.temps))) <= used, "an unused temp"
    assert LaunchPlan.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan
    return types.SimpleNamespace(input_names=[t.name for t in program.inputs], plan=plan)


def _host_dtype(dtype: str) -> str:
    return "uint8" if dtype == "bool" else dtype if dtype not in ("bfloat16",) else "uint16"


@pytest.fixture(name="check_kernel", scope="session")
def plan_check_kernel():
    return _check_plan


globals().update(cuda_suite.suite_tests())


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_families_plans_name_their_buffers(family):
    program, plan, _, kernels = _plan_of(_graph(FAMILIES[family]))
    temps = {b.name: b for b in plan.temps}
    if family == "full_sum":  # the partials, then the sum: k_kernel(partial, x), k_kernel_2(t0, partial)
        assert temps["t0_partial"].shape == (37,) and temps["t0_partial"].nbytes == 148
        assert plan.kernel_args == ((2, 0), (1,), (1, 2))
    if family == "softmax":
        assert {"t0_max", "t0_sum", "t0_exp"} <= set(temps) and temps["t0_exp"].nbytes == 65 * 300 * 4


def test_kernel_parameters_are_read_from_the_cuda_c():
    source = ('extern "C" __global__ void __launch_bounds__(256) k_kernel(float* __restrict__ y_ptr, '
              'half* __restrict__ x_ptr, signed char* __restrict__ m_ptr);\n'
              'extern "C" __global__ void __launch_bounds__(256) k_kernel(float* __restrict__ y_ptr, '
              'half* __restrict__ x_ptr, signed char* __restrict__ m_ptr) {\n}\n'
              'extern "C" __global__ void k_kernel_1(int n) {\n}\n')
    params = kernel_params(source)
    assert [(p.name, p.ctype, p.pointer) for p in params["k_kernel"]] == \
        [("y_ptr", "float", True), ("x_ptr", "half", True), ("m_ptr", "signed char", True)]
    assert [(p.name, p.ctype, p.pointer) for p in params["k_kernel_1"]] == [("n", "int", False)]


def test_a_parameter_that_names_no_buffer_is_a_lowering_error():
    graph = _graph(FAMILIES["row_sum"])
    _, plan, source, kernels = _plan_of(graph)
    from akg.compiler import pipeline_for

    pipeline = pipeline_for(graph, "cuda")
    func, _ = pipeline.lower(pipeline.resolve(None))
    bound, _, _ = cuda_backend.generate(func, pipeline.target)
    with pytest.raises(LoweringError, match=r"k \(k_kernel\): a parameter that names no buffer, float mystery_ptr"):
        launch_plan(bound, source.replace("x_ptr", "mystery_ptr"), kernels)
    with pytest.raises(LoweringError, match=r"a scalar parameter, int n"):
        launch_plan(bound, source.replace("float* __restrict__ x_ptr", "int n"), kernels)
    with pytest.raises(LoweringError, match=r"parameter double\* x_ptr points to x, a float32 buffer"):
        launch_plan(bound, source.replace("float* __restrict__ x_ptr", "double* __restrict__ x_ptr"), kernels)


def test_a_skewed_band_is_tiled_from_its_origin_so_no_kernel_sits_in_a_host_loop():
    """isl skews the band of a pad that reads an exp of a 1x1x1 tensor (members from -1 to 1):
    tiled from 0 it straddled two tiles without a block index, a host loop whose counter
    reached the kernel as a scalar parameter, which the plan refuses (hypothesis found it in
    `test_layout_chain`)."""
    from akg.graph import GraphBuilder

    b = GraphBuilder("k")
    t = b.transpose(b.exp(b.input("x", (1, 1, 1))), perm=[0, 1, 2])
    b.output(b.reshape(t, shape=[-1]), b.pad(t, before=[1, 1, 1], after=[0, 0, 0]))
    _, plan, source, _ = _plan_of(b.build())
    assert all(p.pointer for ps in kernel_params(source).values() for p in ps)
    assert len(plan.kernel_args) == 2


@needs_nvcc
def test_the_plan_survives_export_and_load():
    kernel = akg.build(_graph(FAMILIES["full_sum"]), target="cuda")
    exe = kernel.executable
    assert exe.plan is not None and len(exe.plan.temps) == 1
    backend = get_backend("cuda-cubin")
    again = backend.load(backend.export(exe))
    assert again == exe and again.plan == exe.plan


def test_an_artifact_without_a_plan_loads_and_refuses_to_run(fake):
    exe = cuda_backend.CudaExecutable("k", "sm_80", "", b"", ("k_kernel",), (Launch((1, 1, 1), (1, 1, 1)),))
    backend = get_backend("cuda-cubin")
    again = backend.load(backend.export(exe))
    assert again.plan is None
    with pytest.raises(LoweringError, match="no launch plan"):
        backend.entry(again)


# --- a fake libcuda -----------------------------------------------------------------------------

ERRORS = {1: ("CUDA_ERROR_INVALID_VALUE", "invalid argument"), 2: ("CUDA_ERROR_OUT_OF_MEMORY", "out of memory"),
          700: ("CUDA_ERROR_ILLEGAL_ADDRESS",
                                                                    "an illegal memory access was encountered"),
          209: ("CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device")}


def _out(ref):
    """The ctypes object a byref() points to."""
    return ref._obj


class FakeCuda:
    """The C functions of libcuda that `Driver` calls. Device memory is host memory (a device
    pointer is the address of a host buffer), a module's kernels are Python functions
    `kernels[name](grid, block, pointers)`; `fail[call] = code` (or `fail[(call, kernel)]`)
    makes the next such call return `code`; `elapsed` is what cuEventElapsedTime returns."""

    def __init__(self, capability=(8, 0), kernels=None):
        self.capability = capability
        self.kernels = kernels or {}
        self.calls: list[tuple] = []
        self.memory: dict[int, ctypes.Array] = {}
        self.fail: dict = {}
        self.elapsed = [1.0]
        self._next = 0x1000
        self.modules: dict[int, bytes] = {}
        self.functions: dict[int, str] = {}

    def _handle(self) -> int:
        self._next += 0x10
        return self._next

    def _result(self, *key) -> int:
        for k in (key, key[0]):
            if k in self.fail:
                return self.fail.pop(k)
        return 0

    def cuGetErrorName(self, result, text):
        _out(text).value = ERRORS.get(result.value, ("CUDA_ERROR_UNKNOWN",))[0].encode()
        return 0

    def cuGetErrorString(self, result, text):
        _out(text).value = ERRORS.get(result.value, ("", "unknown error"))[1].encode()
        return 0

    def cuInit(self, flags):
        self.calls.append(("cuInit",))
        return 0

    def cuDeviceGetCount(self, count):
        _out(count).value = 1
        return 0

    def cuDeviceGet(self, device, ordinal):
        _out(device).value = ordinal.value
        return 0

    def cuDeviceGetAttribute(self, value, attribute, device):
        _out(value).value = self.capability[0 if attribute.value == 75 else 1]
        return 0

    def cuDeviceGetName(self, buffer, size, device):
        buffer.value = b"Fake GPU"
        return 0

    def cuDevicePrimaryCtxRetain(self, ctx, device):
        self.calls.append(("retain",))
        _out(ctx).value = 0xC0
        return 0

    def cuDevicePrimaryCtxRelease_v2(self, device):
        self.calls.append(("release",))
        return 0

    def cuDevicePrimaryCtxReset_v2(self, device):
        self.calls.append(("reset",))
        self.memory.clear()
        return 0

    def cuCtxSetCurrent(self, ctx):
        return 0

    def cuCtxSynchronize(self):
        self.calls.append(("sync",))
        return self._result("cuCtxSynchronize")

    def cuModuleLoadData(self, module, image):
        h = self._handle()
        self.modules[h] = image.value
        _out(module).value = h
        self.calls.append(("load", len(image.value or b"")))
        return self._result("cuModuleLoadData")

    def cuModuleUnload(self, module):
        self.calls.append(("unload",))
        return 0

    def cuModuleGetFunction(self, func, module, name):
        h = self._handle()
        self.functions[h] = name.decode()
        _out(func).value = h
        return self._result("cuModuleGetFunction", name.decode())

    def cuMemAlloc_v2(self, ptr, size):
        buf = ctypes.create_string_buffer(size.value)
        address = ctypes.addressof(buf)
        self.memory[address] = buf
        _out(ptr).value = address
        self.calls.append(("alloc", size.value, address))
        return self._result("cuMemAlloc")

    def cuMemFree_v2(self, ptr):
        self.calls.append(("free", ptr.value))
        self.memory.pop(ptr.value, None)
        return 0

    def cuMemsetD8_v2(self, ptr, value, size):
        ctypes.memset(ptr.value, value.value, size.value)
        self.calls.append(("memset", ptr.value, size.value))
        return 0

    def cuMemcpyHtoD_v2(self, dst, src, size):
        ctypes.memmove(dst.value, src.value, size.value)
        self.calls.append(("htod", dst.value, size.value))
        return 0

    def cuMemcpyDtoH_v2(self, dst, src, size):
        ctypes.memmove(dst.value, src.value, size.value)
        self.calls.append(("dtoh", src.value, size.value))
        return 0

    def cuLaunchKernel(self, func, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        name = self.functions[func.value]
        result = self._result("cuLaunchKernel", name)
        if result:
            return result
        n = len(params)
        pointers = [ctypes.c_uint64.from_address(params[i]).value for i in range(n)]
        grid, block = (gx.value, gy.value, gz.value), (bx.value, by.value, bz.value)
        self.calls.append(("launch", name, grid, block, shared.value, tuple(pointers)))
        if name in self.kernels:
            self.kernels[name](grid, block, pointers)
        return 0

    def cuEventCreate(self, event, flags):
        _out(event).value = self._handle()
        return 0

    def cuEventDestroy_v2(self, event):
        self.calls.append(("destroy_event",))
        return 0

    def cuEventRecord(self, event, stream):
        self.calls.append(("record", event.value))
        return 0

    def cuEventSynchronize(self, event):
        self.calls.append(("event_sync", event.value))
        return 0

    def cuEventElapsedTime(self, ms, start, end):
        _out(ms).value = self.elapsed.pop(0) if len(self.elapsed) > 1 else self.elapsed[0]
        return 0

    def of(self, kind: str) -> list[tuple]:
        return [c for c in self.calls if c[0] == kind]


def _array(pointer: int, shape, dtype="float32") -> np.ndarray:
    """The fake device memory at `pointer` as an array."""
    count = int(np.prod(shape)) * np.dtype(dtype).itemsize
    return np.frombuffer((ctypes.c_char * count).from_address(pointer), dtype).reshape(shape)


@pytest.fixture(name="fake")
def fake_cuda():
    """A FakeCuda (sm_80, no kernels) as the CUDA backend's driver for the test."""
    lib = FakeCuda()
    backend = get_backend("cuda-cubin")
    backend.set_driver(Driver(lib))
    yield lib
    backend.set_driver(None)


# a two-kernel executable by hand: y = 2 x (y_kernel), then out = y + 1 through an intermediate
_SOURCE = ('extern "C" __global__ void __launch_bounds__(64) k_kernel(float* __restrict__ tmp_ptr, '
           'float* __restrict__ x_ptr) {\n}\n'
           'extern "C" __global__ void __launch_bounds__(64) k_kernel_1(float* __restrict__ out_ptr, '
           'float* __restrict__ tmp_ptr) {\n}\n')
_PLAN = LaunchPlan((PlanBuffer("x", (3, 100), "float32"), PlanBuffer("out", (3, 100), "float32")),
                   (PlanBuffer("tmp", (3, 100), "float32"),), ((2, 0), (1, 2)), (0, 0))


def _by_hand(arch="sm_80", plan=_PLAN):
    launches = (Launch((5, 1, 1), (64, 1, 1)), Launch((3, 2, 1), (32, 2, 1)))
    return cuda_backend.CudaExecutable("k", arch, _SOURCE, b"\x7fELF-fake-cubin", ("k_kernel", "k_kernel_1"),
                                       launches, {}, plan)


def _kernels(shift: float = 1.0):
    def double(grid, block, pointers):
        tmp, x = pointers
        _array(tmp, (3, 100))[...] = 2 * _array(x, (3, 100))

    def add(grid, block, pointers):
        out, tmp = pointers
        _array(out, (3, 100))[...] = _array(tmp, (3, 100)) + shift

    return {"k_kernel": double, "k_kernel_1": add}


def test_a_call_copies_launches_in_order_and_copies_back(fake):
    fake.kernels = _kernels()
    backend = get_backend("cuda-cubin")
    exe = _by_hand()
    x = np.arange(300, dtype="float32").reshape(3, 100)
    (out,) = backend.run(exe, [x], [((3, 100), "float32")])
    np.testing.assert_array_equal(out, 2 * x + 1)
    assert fake.of("load") == [("load", len(exe.cubin))]
    sizes = [c[1] for c in fake.of("alloc")]
    assert sizes == [1200, 1200, 1200]  # x, out, the intermediate (when the module is loaded)
    tmp_ptr = fake.of("alloc")[2][2]  # run: x to the device, out allocated, then the module loaded
    (htod,) = fake.of("htod")
    (memset,) = fake.of("memset")
    x_ptr, out_ptr = htod[1], memset[1]
    launches = fake.of("launch")
    assert launches == [("launch", "k_kernel", (5, 1, 1), (64, 1, 1), 0, (tmp_ptr, x_ptr)),
                        ("launch", "k_kernel_1", (3, 2, 1), (32, 2, 1), 0, (out_ptr, tmp_ptr))]
    names = [c[0] for c in fake.calls]
    first, second = (i for i, n in enumerate(names) if n == "launch")
    assert names[first + 1] == "sync" and names[second + 1] == "sync"  # each kernel waited for
    assert fake.of("dtoh") == [("dtoh", out_ptr, 1200)]
    backend.entry(exe)  # loaded once per executable
    assert len(fake.of("load")) == 1


def test_tensors_are_checked_against_the_plan(fake):
    backend = get_backend("cuda-cubin")
    kernel = backend.entry(_by_hand())
    x = backend.to_device(np.zeros((3, 100), "float32"))
    with pytest.raises(CudaError, match="k takes 2 tensors, got 1"):
        kernel(x)
    with pytest.raises(CudaError, match=r"argument out \(float32\[3, 100\], 1200 bytes\) is given a tensor of 400"):
        kernel(x, backend.empty((100,), "float32"))
    with pytest.raises(CudaError, match="argument x is a ndarray, not a GPU tensor"):
        kernel(np.zeros((3, 100), "float32"), x)


def test_tensors_round_trip_and_are_freed(fake):
    backend = get_backend("cuda-cubin")
    for a in (np.arange(12, dtype="int64").reshape(3, 4), np.float16(2.5) * np.ones((), "float16"),
              np.array([True, False]), np.zeros((0, 3), "float32")):
        t = backend.to_device(a)
        got = backend.to_numpy(t)
        assert got.dtype == a.dtype and got.shape == a.shape and np.array_equal(got, a)
        ptr = t.ptr
        del t
        assert ("free", ptr) in fake.calls
    arena = backend.empty((64,), "uint8")
    view = backend.view(arena, (4, 2), "float32")
    assert view.ptr == arena.ptr and np.array_equal(backend.to_numpy(view), np.zeros((4, 2), "float32"))
    del view
    assert ("free", arena.ptr) not in fake.calls  # a view frees nothing


def test_measure_times_number_calls_between_two_events(fake):
    fake.kernels = _kernels()
    fake.elapsed = [6.0, 3.0, 4.5]  # ms per repeat
    backend = get_backend("cuda-cubin")
    exe = _by_hand()
    tensors = [backend.to_device(np.ones((3, 100), "float32")), backend.empty((3, 100), "float32")]
    backend.entry(exe)  # the module loaded
    fake.calls.clear()
    costs = backend.measure(exe, tensors, number=3, repeat=3)
    assert costs == pytest.approx([2e-3, 1e-3, 1.5e-3])  # ms / 1000 / number: seconds per call
    names = [c[0] for c in fake.calls]
    assert names[:3] == ["launch", "launch", "sync"]  # the warm-up call
    start, end = fake.of("record")[:2]
    timed = names[names.index("record"):]
    assert timed[:8] == ["record"] + ["launch"] * 6 + ["record"]  # 3 calls x 2 kernels
    assert timed[8] == "event_sync" and fake.of("event_sync")[0][1] == end[1] != start[1]
    assert names.count("launch") == 2 + 3 * 3 * 2 and len(fake.of("destroy_event")) == 2


def test_driver_errors_name_the_call_and_the_kernel(fake):
    backend = get_backend("cuda-cubin")
    exe = _by_hand()
    fake.fail[("cuLaunchKernel", "k_kernel_1")] = 1
    tensors = [backend.to_device(np.ones((3, 100), "float32")), backend.empty((3, 100), "float32")]
    with pytest.raises(CudaError, match=r"cuLaunchKernel \(k_kernel_1\) failed: CUDA_ERROR_INVALID_VALUE "
                                        r"\(invalid argument\)$") as info:
        backend.entry(exe)(*tensors)
    assert (info.value.call, info.value.kernel, info.value.code, info.value.sticky) == \
        ("cuLaunchKernel", "k_kernel_1", "CUDA_ERROR_INVALID_VALUE", False)
    fake.fail["cuMemAlloc"] = 2
    with pytest.raises(CudaError, match=r"^cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY \(out of memory\)$"):
        backend.empty((10,), "float32")


def test_a_fault_resets_the_context_and_the_next_call_starts_afresh(fake):
    fake.kernels = _kernels()
    backend = get_backend("cuda-cubin")
    exe = _by_hand()
    x = backend.to_device(np.ones((3, 100), "float32"))
    out = backend.empty((3, 100), "float32")
    fake.fail["cuCtxSynchronize"] = 700  # after the first kernel
    with pytest.raises(CudaError, match=r"cuCtxSynchronize \(k_kernel\) failed: CUDA_ERROR_ILLEGAL_ADDRESS "
                                        r".*; the CUDA context was reset") as info:
        backend.entry(exe)(x, out)
    assert info.value.sticky and ("reset",) in fake.calls
    with pytest.raises(CudaError, match="freed by a context reset"):
        backend.to_numpy(x)
    del x, out  # nothing to free: the reset did
    assert not fake.of("free")
    loads = len(fake.of("load"))
    (got,) = backend.run(exe, [np.full((3, 100), 2, "float32")], [((3, 100), "float32")])
    assert np.array_equal(got, np.full((3, 100), 5, "float32")) and len(fake.of("load")) == loads + 1


def test_an_executable_for_another_arch_is_refused_before_loading():
    lib = FakeCuda(capability=(9, 0))
    backend = get_backend("cuda-cubin")
    backend.set_driver(Driver(lib))
    try:
        with pytest.raises(GpuMismatchError, match=r"compiled for sm_80, the GPU here \(Fake GPU\) is sm_90: "
                                                   r"build for a target of that GPU \(--target=cuda-sm90\)"):
            backend.entry(_by_hand())
        backend.entry(_by_hand("sm_90"))
    finally:
        backend.set_driver(None)
    assert cuda_backend._runs_on("sm_80", (8, 6)) and not cuda_backend._runs_on("sm_86", (8, 0))
    assert cuda_backend._runs_on("sm_90a", (9, 0)) and not cuda_backend._runs_on("sm_90a", (10, 0))
    assert issubclass(GpuMismatchError, NoGpuError)


def test_without_libcuda_the_driver_is_a_no_gpu_error():
    with pytest.raises(NoGpuError, match="libakg-no-such-cuda.so cannot be loaded"):
        load_library("libakg-no-such-cuda.so")


def test_the_tuners_runner_verifies_and_times_through_the_driver(fake):
    from akg.db.record import Status
    from akg.tuner.runner.evaluate import TaskArrays, run_artifact

    backend = get_backend("cuda-cubin")
    artifact = backend.export(_by_hand())
    x = np.linspace(-1, 1, 300, dtype="float32").reshape(3, 100)
    task = TaskArrays(["out"], [x], [2 * x + 1], [(2 * x + 1).astype("float64")])
    fake.kernels = _kernels()
    fake.elapsed = [0.004]
    status, cost, error = run_artifact(artifact, task, "s", min_seconds=0.0, repeats=2)
    assert (status, error) == (Status.OK, "") and cost == pytest.approx(4e-6)
    fake.kernels = _kernels(shift=1.5)  # a wrong kernel: no time, a wrong result
    status, cost, error = run_artifact(artifact, task, "s", min_seconds=0.0, repeats=2)
    assert status == Status.WRONG_RESULT and cost is None and "out" in error


@needs_nvcc
def test_a_built_kernel_launches_with_its_plan_over_the_fake(fake):
    kernel = akg.build(_graph(FAMILIES["full_sum"]), target="cuda")
    exe = kernel.executable
    backend = get_backend("cuda-cubin")
    x = backend.to_device(np.ones((37, 41), "float32"))
    out = backend.empty((), "float32")
    backend.entry(exe)(x, out)
    temp = fake.of("alloc")[-1]  # allocated at load, after x and out
    assert temp[1] == 148
    launches = fake.of("launch")
    assert [c[1] for c in launches] == ["k_kernel", "k_kernel_1", "k_kernel_2"]
    assert [(c[2], c[3]) for c in launches] == [(lnch.grid, lnch.block) for lnch in exe.launches]
    partial = launches[0][5][0]
    assert launches[0][5] == (partial, x.ptr) and launches[1][5] == (out.ptr,) and \
        launches[2][5] == (out.ptr, partial)


# --- on a GPU -----------------------------------------------------------------------------------


def gpu_target() -> str:
    """The registered cuda target of the GPU here (skips where there is none)."""
    if not cuda_backend.gpu_present():
        pytest.skip("no CUDA GPU here (nvidia-smi lists none)")
    from akg.backends.cuda.driver import get_driver
    from akg.backends.cuda.spec import GPU_SPECS

    driver = get_driver()
    arch = "sm_" + "".join(map(str, driver.capability))
    if arch not in GPU_SPECS:
        pytest.skip(f"no target of akg's for {arch} ({driver.name})")
    return "cuda-" + arch.replace("_", "")


def _check_on_gpu(graph, kernel=None, seed: int = 0, inputs=None):
    from tests_conftest_cuda import assert_matches_reference

    kernel = kernel or akg.build(graph, target=gpu_target())
    return assert_matches_reference(graph, kernel, seed, inputs)


@pytest.fixture(name="gpu_check_kernel", scope="session")
def gpu_check_kernel_fixture():
    return _check_on_gpu


def _on_gpu(fn):
    """A suite test run with `check_kernel` on the GPU."""
    import inspect

    def test(gpu_check_kernel, **kwargs):
        gpu_target()
        return fn(check_kernel=gpu_check_kernel, **kwargs)

    params = [p for name, p in inspect.signature(fn).parameters.items() if name != "check_kernel"]
    test.__signature__ = inspect.Signature([inspect.Parameter("gpu_check_kernel",
                                                              inspect.Parameter.POSITIONAL_OR_KEYWORD), *params])
    test.__name__ = test.__qualname__ = f"{fn.__name__}_on_gpu"
    test.pytestmark = [*getattr(fn, "pytestmark", []), pytest.mark.gpu]
    return test


globals().update({f"{name}_on_gpu": _on_gpu(fn) for name, fn in cuda_suite.suite_tests().items()})


@pytest.mark.gpu
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_kernel_families_on_the_gpu(family):
    _check_on_gpu(_graph(FAMILIES[family]))


@pytest.mark.gpu
def test_timing_a_matmul_on_the_gpu():
    target = gpu_target()
    from akg.graph import GraphBuilder

    b = GraphBuilder("k")
    b.output(b.matmul(b.input("a", (512, 512)), b.input("w", (512, 512))))
    graph = b.build()
    kernel = _check_on_gpu(graph)
    backend = kernel.target.backend()
    tensors, outs = kernel.device_arguments(np.ones((512, 512), "float32"), np.ones((512, 512), "float32"))
    costs = backend.measure(kernel.executable, [*tensors, *outs], number=20, repeat=5)
    assert len(costs) == 5 and all(0 < c < 1.0 for c in costs)
    flops = 2 * 512 ** 3 / min(costs)
    print(f"{target}: matmul 512^3 {min(costs) * 1e6:.1f} us, {flops / 1e9:.0f} GFLOP/s")
    assert np.all(backend.to_numpy(outs[0]) == 512)


def test_a_driver_that_cannot_start_is_a_no_gpu_error(monkeypatch):
    from akg.backends.cuda import driver as driver_module

    lib = FakeCuda()
    lib.cuInit = lambda flags: 100  # CUDA_ERROR_NO_DEVICE
    with pytest.raises(CudaError, match=r"^cuInit failed: CUDA_ERROR_UNKNOWN"):
        Driver(lib)
    monkeypatch.setattr(driver_module, "_DRIVER", None)
    monkeypatch.setattr(driver_module, "load_library", lambda: lib)
    with pytest.raises(NoGpuError, match="the CUDA driver cannot start: cuInit failed"):
        driver_module.get_driver()
    monkeypatch.setattr(cuda_backend, "gpu_present", lambda: True)
    with pytest.raises(NoGpuError, match="cannot copy a tensor to the GPU: the CUDA driver cannot start"):
        get_backend("cuda-cubin").to_device(np.zeros(3))


@needs_nvcc
def test_the_gpu_check_loads_its_cases_where_akg_has_no_compiler(tmp_path):
    """scripts/gpu_check.py: cases prepared here load on a machine without TVM or islpy and
    without akg installed (the lent GPU machines), their references computed there."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).parents[4]
    script = root / "scripts" / "gpu_check.py"
    prepared = subprocess.run([sys.executable, str(script), "prepare", str(tmp_path), "--quick", "--candidates", "1"],
                              capture_output=True, text=True, timeout=600)
    assert prepared.returncode == 0, prepared.stderr[-2000:]
    assert "prepared 4 cases for cuda-sm90" in prepared.stdout
    bare = ("import runpy, sys\n"
            "sys.modules['tvm'] = None\nsys.modules['islpy'] = None\n"
            "sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in repr(f).lower()]\n"
            f"sys.argv = ['gpu_check.py', 'run', '--dry', {str(tmp_path)!r}]\n"
            f"runpy.run_path({str(script)!r}, run_name='__main__')\n")
    ran = subprocess.run([sys.executable, "-c", bare], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    assert "akg's compiler not here" in ran.stdout and "4 references computed, 4 artifacts with launch plans" \
        in ran.stdout


# --- the same calls through a C library with libcuda's signatures -------------------------------

SHIM = r"""
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext, *CUmodule, *CUfunction, *CUevent, *CUstream;
typedef unsigned long long CUdeviceptr;

static char log_text[1 << 16];
static size_t log_len;
static int fail_next;
static void note(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  log_len += vsnprintf(log_text + log_len, sizeof log_text - log_len, fmt, ap);
  va_end(ap);
}
const char *shim_log(void) { return log_text; }
void shim_fail_next_launch(int code) { fail_next = code; }

CUresult cuInit(unsigned int flags) { note("init %u\n", flags); return 0; }
CUresult cuDeviceGetCount(int *count) { *count = 1; return 0; }
CUresult cuDeviceGet(CUdevice *device, int ordinal) { *device = ordinal; return 0; }
CUresult cuDeviceGetAttribute(int *value, int attribute, CUdevice device) {
  *value = attribute == 75 ? 8 : attribute == 76 ? 6 : -1; return 0; }
CUresult cuDeviceGetName(char *name, int len, CUdevice device) { snprintf(name, len, "Shim GPU"); return 0; }
CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice device) { *ctx = (void *)0xC0; return 0; }
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice device) { return 0; }
CUresult cuDevicePrimaryCtxReset_v2(CUdevice device) { note("reset\n"); return 0; }
CUresult cuCtxSetCurrent(CUcontext ctx) { return ctx == (void *)0xC0 ? 0 : 201; }
CUresult cuCtxSynchronize(void) { return 0; }
CUresult cuModuleLoadData(CUmodule *module, const void *image) {
  note("load %.8s\n", (const char *)image); *module = (void *)0x40; return 0; }
CUresult cuModuleUnload(CUmodule module) { return 0; }
CUresult cuModuleGetFunction(CUfunction *func, CUmodule module, const char *name) {
  *func = strdup(name); return module == (void *)0x40 ? 0 : 400; }
CUresult cuMemAlloc_v2(CUdeviceptr *ptr, size_t size) {
  *ptr = (CUdeviceptr)(uintptr_t)calloc(1, size); note("alloc %zu\n", size); return 0; }
CUresult cuMemFree_v2(CUdeviceptr ptr) { free((void *)(uintptr_t)ptr); return 0; }
CUresult cuMemsetD8_v2(CUdeviceptr ptr, unsigned char value, size_t size) {
  memset((void *)(uintptr_t)ptr, value, size); return 0; }
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t size) {
  memcpy((void *)(uintptr_t)dst, src, size); return 0; }
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t size) {
  memcpy(dst, (void *)(uintptr_t)src, size); return 0; }
/* k_kernel: tmp = 2 x; k_kernel_1: out = tmp + 1 (300 floats), as test_driver's _kernels() */
CUresult cuLaunchKernel(CUfunction func, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned shared, CUstream stream, void **params, void **extra) {
  if (fail_next) { int code = fail_next; fail_next = 0; return code; }
  float *a = (float *)(uintptr_t)*(CUdeviceptr *)params[0], *b = (float *)(uintptr_t)*(CUdeviceptr *)params[1];
  int second = strcmp((const char *)func, "k_kernel_1") == 0;
  for (int i = 0; i < 300; i++) a[i] = second ? b[i] + 1 : 2 * b[i];
  note("launch %s %u %u %u %u %u %u %u %p %p %p %p\n", (const char *)func, gx, gy, gz, bx, by, bz, shared, stream,
       (void *)extra, (void *)a, (void *)b);
  return 0;
}
CUresult cuEventCreate(CUevent *event, unsigned int flags) { *event = malloc(1); return 0; }
CUresult cuEventDestroy_v2(CUevent event) { free(event); return 0; }
CUresult cuEventRecord(CUevent event, CUstream stream) { note("record %p\n", stream); return 0; }
CUresult cuEventSynchronize(CUevent event) { return 0; }
CUresult cuEventElapsedTime_v2(float *ms, CUevent start, CUevent end) { *ms = 2.5f; return 0; }
CUresult cuGetErrorName(CUresult error, const char **text) {
  *text = error == 1 ? "CUDA_ERROR_INVALID_VALUE" : "CUDA_ERROR_UNKNOWN"; return 0; }
CUresult cuGetErrorString(CUresult error, const char **text) {
  *text = error == 1 ? "invalid argument" : "unknown error"; return 0; }
"""


@pytest.fixture(name="shim")
def c_shim(tmp_path):
    """A C library with libcuda's signatures (device memory in host memory, the two kernels of
    `_by_hand` computed in C) as the backend's driver: the ctypes calls cross a real C ABI."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    import subprocess

    (tmp_path / "shim.c").write_text(SHIM)
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(tmp_path / "libshim.so"), str(tmp_path / "shim.c")],
                   check=True)
    lib = ctypes.CDLL(str(tmp_path / "libshim.so"))
    lib.shim_log.restype = ctypes.c_char_p
    backend = get_backend("cuda-cubin")
    backend.set_driver(Driver(lib))
    yield lib
    backend.set_driver(None)


def test_the_driver_calls_cross_a_c_abi(shim):
    backend = get_backend("cuda-cubin")
    exe = _by_hand()
    x = np.linspace(-3, 3, 300, dtype="float32").reshape(3, 100)
    tensors = [backend.to_device(x), backend.empty((3, 100), "float32")]
    backend.entry(exe)(*tensors)
    np.testing.assert_array_equal(backend.to_numpy(tensors[1]), 2 * x + 1)
    log = shim.shim_log().decode().splitlines()
    assert log[0] == "init 0" and "load \x7fELF-fak" in log
    launches = [line.split() for line in log if line.startswith("launch")]
    tmp = launches[0][11]
    assert [lnch[1:12] for lnch in launches] == [
        ["k_kernel", "5", "1", "1", "64", "1", "1", "0", "(nil)", "(nil)", tmp],
        ["k_kernel_1", "3", "2", "1", "32", "2", "1", "0", "(nil)", "(nil)", hex(tensors[1].ptr)]]
    assert launches[0][12] == hex(tensors[0].ptr) and launches[1][12] == tmp  # the plan's pointers, in order
    costs = backend.measure(exe, tensors, number=5, repeat=2)
    assert costs == [pytest.approx(2.5e-3 / 5)] * 2
    shim.shim_fail_next_launch(1)
    with pytest.raises(CudaError, match=r"^cuLaunchKernel \(k_kernel\) failed: CUDA_ERROR_INVALID_VALUE "
                                        r"\(invalid argument\)$"):
        backend.entry(exe)(*tensors)
    with pytest.raises(GpuMismatchError, match=r"the GPU here \(Shim GPU\) is sm_86"):
        backend.entry(_by_hand("sm_90"))
