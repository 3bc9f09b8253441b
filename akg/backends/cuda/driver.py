"""The CUDA driver API through ctypes: what the CUDA backend needs to run and time its
kernels without TVM's CUDA runtime (the TVM wheel here has none) and without any Python
package of NVIDIA's: `libcuda.so.1`, which comes with the NVIDIA driver.

`Driver` wraps the C functions one by one (device, primary context, modules from a cubin,
device memory, copies, launches, events); every `CUresult` is checked, and a failure is a
`CudaError` naming the call, the kernel where there is one, and the driver's name of the
error (`cuGetErrorName`). A fault that leaves the context unusable (an illegal address in a
kernel) resets this process's primary context (`cuDevicePrimaryCtxReset`), so that the next
candidate of a tuner runs in a fresh context; memory of the old context is then gone, and a
tensor made before is refused (`Driver.generation`).

The functions are looked up on `lib` by their C names, so a test can hand `Driver` any
object with those names (a fake that records the calls; tests/akg/backends/cuda/test_driver.py).
Every argument is passed as an explicit ctypes value (`c_uint64` device pointers, `c_size_t`
sizes, `c_void_p` handles, `byref` out-parameters)."""

from __future__ import annotations

import ctypes
import threading
from ctypes import byref, c_char_p, c_float, c_int, c_size_t, c_uint, c_uint64, c_void_p

from akg.backends.cuda.errors import CudaError, NoGpuError

LIBRARY = "libcuda.so.1"
SUCCESS = 0
# errors after which the context cannot be used again (the CUDA documentation's "sticky" errors)
STICKY = {"CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_LAUNCH_FAILED", "CUDA_ERROR_MISALIGNED_ADDRESS",
          "CUDA_ERROR_ILLEGAL_INSTRUCTION", "CUDA_ERROR_INVALID_PC", "CUDA_ERROR_HARDWARE_STACK_ERROR",
          "CUDA_ERROR_INVALID_ADDRESS_SPACE", "CUDA_ERROR_ASSERT", "CUDA_ERROR_LAUNCH_TIMEOUT",
          "CUDA_ERROR_ECC_UNCORRECTABLE", "CUDA_ERROR_UNKNOWN"}
_ATTR_CC_MAJOR, _ATTR_CC_MINOR = 75, 76  # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR / _MINOR
_EVENT_DEFAULT = 0


def load_library(name: str = LIBRARY):
    """libcuda, or NoGpuError saying why it cannot be loaded."""
    try:
        return ctypes.CDLL(name)
    except OSError as e:
        raise NoGpuError(f"the CUDA driver library {name} cannot be loaded: {e}") from None


class Driver:
    """One device's primary context and the calls the CUDA backend makes on it. Thread-safe
    where the backend needs it: the context is made current on the calling thread by every
    public method (`activate`)."""

    def __init__(self, lib, ordinal: int = 0):
        self.lib = lib
        self.ordinal = ordinal
        self.generation = 0  # bumped by every context reset after a sticky fault
        self.device: int | None = None
        self._ctx: c_void_p | None = None
        self._lock = threading.RLock()
        # what CUDA 13's cuda.h names cuEventElapsedTime (older drivers have only the first)
        self._elapsed_time = getattr(lib, "cuEventElapsedTime_v2", None) or lib.cuEventElapsedTime
        self._check(lib.cuInit(c_uint(0)), "cuInit")
        count = c_int(0)
        self._check(lib.cuDeviceGetCount(byref(count)), "cuDeviceGetCount")
        if count.value <= ordinal:
            raise NoGpuError(f"the CUDA driver sees {count.value} GPU(s), none with ordinal {ordinal}")
        device = c_int(0)
        self._check(lib.cuDeviceGet(byref(device), c_int(ordinal)), "cuDeviceGet")
        self.device = device.value
        self.capability = (self._attribute(_ATTR_CC_MAJOR), self._attribute(_ATTR_CC_MINOR))
        name = ctypes.create_string_buffer(256)
        self._check(lib.cuDeviceGetName(name, c_int(256), c_int(self.device)), "cuDeviceGetName")
        self.name = name.value.decode(errors="replace")

    # --- errors ------------------------------------------------------------------------------

    def error_name(self, result: int) -> str:
        text = c_char_p()
        if self.lib.cuGetErrorName(c_int(result), byref(text)) != SUCCESS or not text.value:
            return f"CUresult {result}"
        return text.value.decode(errors="replace")

    def error_text(self, result: int) -> str:
        text = c_char_p()
        if self.lib.cuGetErrorString(c_int(result), byref(text)) != SUCCESS or not text.value:
            return ""
        return text.value.decode(errors="replace")

    def _check(self, result: int, call: str, kernel: str | None = None) -> None:
        if result == SUCCESS:
            return
        name = self.error_name(result)
        text = self.error_text(result)
        where = f"{call} ({kernel})" if kernel else call
        sticky = name in STICKY
        if sticky:
            self._reset()
        raise CudaError(f"{where} failed: {name}" + (f" ({text})" if text else "")
                        + ("; the CUDA context was reset" if sticky else ""), call=call, kernel=kernel,
                        code=name, sticky=sticky)

    def _attribute(self, attribute: int) -> int:
        value = c_int(0)
        self._check(self.lib.cuDeviceGetAttribute(byref(value), c_int(attribute), c_int(self.device)),
                    "cuDeviceGetAttribute")
        return value.value

    # --- the context ---------------------------------------------------------------------------

    def activate(self) -> None:
        """The device's primary context, retained once and made current on this thread."""
        with self._lock:
            if self._ctx is None:
                ctx = c_void_p()
                self._check(self.lib.cuDevicePrimaryCtxRetain(byref(ctx), c_int(self.device)),
                            "cuDevicePrimaryCtxRetain")
                self._ctx = ctx
            self._check(self.lib.cuCtxSetCurrent(self._ctx), "cuCtxSetCurrent")

    def _reset(self) -> None:
        """After a sticky fault: drop every resource of this process's context (not the device's)."""
        if self.device is None:  # cuInit or the device lookup failed: no context yet
            return
        with self._lock:
            self.generation += 1
            if self._ctx is not None:
                self.lib.cuDevicePrimaryCtxRelease_v2(c_int(self.device))
                self._ctx = None
            self.lib.cuDevicePrimaryCtxReset_v2(c_int(self.device))

    def synchronize(self, kernel: str | None = None) -> None:
        self.activate()
        self._check(self.lib.cuCtxSynchronize(), "cuCtxSynchronize", kernel)

    # --- modules and kernels -----------------------------------------------------------------

    def load_module(self, image: bytes, what: str) -> c_void_p:
        self.activate()
        module = c_void_p()
        self._check(self.lib.cuModuleLoadData(byref(module), c_char_p(image)), "cuModuleLoadData", what)
        return module

    def unload_module(self, module: c_void_p, generation: int) -> None:
        if generation == self.generation:  # a reset unloaded it already
            self.activate()
            self._check(self.lib.cuModuleUnload(module), "cuModuleUnload")

    def function(self, module: c_void_p, kernel: str) -> c_void_p:
        self.activate()
        func = c_void_p()
        self._check(self.lib.cuModuleGetFunction(byref(func), module, kernel.encode()), "cuModuleGetFunction",
                    kernel)
        return func

    @staticmethod
    def launch_args(func: c_void_p, grid, block, shared: int, params) -> tuple:
        """cuLaunchKernel's arguments, as ctypes values made once (a timed loop only calls):
        `params` is a `(c_void_p * n)` array of pointers to the argument values (what
        `kernel_params` builds)."""
        return (func, c_uint(grid[0]), c_uint(grid[1]), c_uint(grid[2]), c_uint(block[0]), c_uint(block[1]),
                c_uint(block[2]), c_uint(shared), c_void_p(0), params, c_void_p(0))

    def launch(self, args: tuple, kernel: str) -> None:
        """Launch a kernel on the default stream (`args` from `launch_args`)."""
        result = self.lib.cuLaunchKernel(*args)
        if result:
            self._check(result, "cuLaunchKernel", kernel)

    @staticmethod
    def kernel_params(pointers) -> tuple:
        """(the `void**` array cuLaunchKernel takes, the values it points into: keep both
        alive while launching) for device pointers passed by value."""
        values = (c_uint64 * max(1, len(pointers)))(*pointers)
        base = ctypes.addressof(values)
        size = ctypes.sizeof(c_uint64)
        params = (c_void_p * max(1, len(pointers)))(*(base + i * size for i in range(len(pointers))))
        return params, values

    # --- memory --------------------------------------------------------------------------------

    def alloc(self, nbytes: int) -> int:
        self.activate()
        ptr = c_uint64(0)
        self._check(self.lib.cuMemAlloc_v2(byref(ptr), c_size_t(max(1, nbytes))), "cuMemAlloc")
        return ptr.value

    def free(self, ptr: int, generation: int) -> None:
        if generation != self.generation:  # freed by a reset
            return
        self.activate()
        self._check(self.lib.cuMemFree_v2(c_uint64(ptr)), "cuMemFree")

    def memset(self, ptr: int, nbytes: int) -> None:
        if nbytes:
            self.activate()
            self._check(self.lib.cuMemsetD8_v2(c_uint64(ptr), ctypes.c_ubyte(0), c_size_t(nbytes)), "cuMemsetD8")

    def copy_to_device(self, ptr: int, host: int, nbytes: int) -> None:
        if nbytes:
            self.activate()
            self._check(self.lib.cuMemcpyHtoD_v2(c_uint64(ptr), c_void_p(host), c_size_t(nbytes)), "cuMemcpyHtoD")

    def copy_to_host(self, host: int, ptr: int, nbytes: int) -> None:
        if nbytes:
            self.activate()
            self._check(self.lib.cuMemcpyDtoH_v2(c_void_p(host), c_uint64(ptr), c_size_t(nbytes)), "cuMemcpyDtoH")

    # --- events --------------------------------------------------------------------------------

    def event(self) -> c_void_p:
        self.activate()
        ev = c_void_p()
        self._check(self.lib.cuEventCreate(byref(ev), c_uint(_EVENT_DEFAULT)), "cuEventCreate")
        return ev

    def destroy_event(self, ev: c_void_p, generation: int) -> None:
        if generation == self.generation:
            self._check(self.lib.cuEventDestroy_v2(ev), "cuEventDestroy")

    def record(self, ev: c_void_p, kernel: str | None = None) -> None:
        self._check(self.lib.cuEventRecord(ev, c_void_p(0)), "cuEventRecord", kernel)

    def elapsed_ms(self, start: c_void_p, end: c_void_p, kernel: str | None = None) -> float:
        """Milliseconds between two recorded events, once `end` has happened."""
        self._check(self.lib.cuEventSynchronize(end), "cuEventSynchronize", kernel)
        ms = c_float(0.0)
        self._check(self._elapsed_time(byref(ms), start, end), "cuEventElapsedTime", kernel)
        return float(ms.value)


_DRIVER: Driver | None = None
_DRIVER_LOCK = threading.Lock()


def get_driver() -> Driver:
    """This process's driver of GPU 0 (NoGpuError where libcuda or a GPU is missing)."""
    global _DRIVER
    with _DRIVER_LOCK:
        if _DRIVER is None:
            lib = load_library()
            try:
                _DRIVER = Driver(lib)
            except CudaError as e:
                raise NoGpuError(f"the CUDA driver cannot start: {e}") from None
        return _DRIVER
