"""The kernel test suite (tests/akg/test_build.py) for other test modules to collect again:
every test there that checks its kernels through the `check_kernel` fixture alone, so that a
module defining its own `check_kernel` runs the suite's graphs through its own check."""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path

SOURCE = Path(__file__).parents[1] / "akg" / "test_build.py"


def suite_tests() -> dict:
    """name -> test function of the suite's kernel tests (the others build with CPU configs
    or look at CPU code on purpose)."""
    spec = importlib.util.spec_from_file_location("kernel_suite_build", SOURCE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tests = {}
    for name, fn in vars(module).items():
        if not name.startswith("test_") or not callable(fn):
            continue
        inner = fn.hypothesis.inner_test if hasattr(fn, "hypothesis") else fn
        source = inspect.getsource(fn)
        if "check_kernel" in inspect.signature(inner).parameters and "akg.build" not in source \
                and ".tir()" not in source:
            tests[name] = fn
    return tests
