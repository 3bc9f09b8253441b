"""Child process for :func:`peers.numpy_baseline` (and NumPy-side peak measurements).

Runs in a fresh interpreter whose environment has ``OPENBLAS_CORETYPE`` and
``OPENBLAS_L2_SIZE`` removed (the parent does that), so that OpenBLAS picks its
own kernels for the host CPU.  Deliberately imports only NumPy (and the module
holding the function to time) -- never TVM -- so that nothing else loads a BLAS
or an OpenMP runtime into the process.

Usage:  python _np_worker.py SPEC.json
SPEC = {"fn": "path/to/file.py:qualname" | "module:qualname",
        "arrays": "path/to/arrays.npz" | null,   # list of arrays, fn(arrays)
        "min_seconds": float, "min_repeats": int, "max_repeats": int}
Prints one JSON line (prefixed with ``@@RESULT@@``) with the median time.
"""

import importlib
import importlib.util
import json
import math
import os
import statistics
import sys
import time


def _resolve(spec: str):
    target, _, qualname = spec.rpartition(":")
    if target.endswith(".py"):
        mod_dir = os.path.dirname(os.path.abspath(target))
        if mod_dir not in sys.path:
            sys.path.insert(0, mod_dir)
        name = "_np_peer_" + os.path.splitext(os.path.basename(target))[0]
        mspec = importlib.util.spec_from_file_location(name, target)
        module = importlib.util.module_from_spec(mspec)
        sys.modules[name] = module
        mspec.loader.exec_module(module)
    else:
        module = importlib.import_module(target)
    obj = module
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _blas_info(np):
    try:
        cfg = np.show_config(mode="dicts")
        blas = cfg["Build Dependencies"]["blas"]
        return f"{blas.get('name')} {blas.get('version', '')}".strip()
    except Exception:  # noqa: BLE001  # pylint: disable=broad-except
        return "unknown"


def main():
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    import numpy as np  # pylint: disable=import-outside-toplevel

    fn = _resolve(spec["fn"])
    arrays = []
    if spec.get("arrays"):
        with np.load(spec["arrays"]) as z:
            arrays = [z[f"a{i}"] for i in range(len(z.files))]
    min_seconds = float(spec.get("min_seconds", 0.2))
    min_repeats = int(spec.get("min_repeats", 5))
    max_repeats = int(spec.get("max_repeats", 200))

    # warm-up (also first estimate)
    t0 = time.perf_counter()
    fn(arrays)
    est = time.perf_counter() - t0
    t0 = time.perf_counter()
    fn(arrays)
    est = max(min(est, time.perf_counter() - t0), 1e-9)

    # each repeat lasts >= ~min_seconds/min_repeats (and >= 5 ms) so timer
    # overhead is negligible for micro-second kernels
    per_repeat = max(min_seconds / min_repeats, 5e-3)
    number = max(1, round(per_repeat / est))
    repeat = max(min_repeats, math.ceil(min_seconds / (number * est)))
    if est > 1.0:
        repeat = 3
    repeat = min(repeat, max_repeats)
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn(arrays)
        samples.append((time.perf_counter() - t0) / number)
    out = {
        "median": statistics.median(samples),
        "min": min(samples),
        "samples": samples,
        "number": number,
        "repeat": repeat,
        "numpy": np.__version__,
        "blas": _blas_info(np),
        "env_OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
        "env_OPENBLAS_L2_SIZE": os.environ.get("OPENBLAS_L2_SIZE"),
    }
    print("@@RESULT@@" + json.dumps(out), flush=True)


# --- NumPy kernels used by peers.machine_peaks() (module-level so the worker can
# --- resolve them as "_np_worker.py:name") ----------------------------------
def np_sgemm(arrays):
    """C = A @ B in float32 (BLAS sgemm); a lower bound on the FP32 peak."""
    a, b, c = arrays
    import numpy as np  # pylint: disable=import-outside-toplevel

    np.matmul(a, b, out=c)


def np_copy(arrays):
    """dst[:] = src (single-threaded memcpy-like; a lower bound on bandwidth)."""
    src, dst = arrays
    import numpy as np  # pylint: disable=import-outside-toplevel

    np.copyto(dst, src)


if __name__ == "__main__":
    main()
