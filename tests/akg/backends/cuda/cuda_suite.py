"""The kernel test suite (tests/akg/test_build.py), loaded for the CUDA tests to collect again
with their own `check_kernel`."""

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("kernel_suite_cuda",
                                               Path(__file__).parents[3] / "targets" / "kernel_suite.py")
_suite = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_suite)


def suite_tests() -> dict:
    return _suite.suite_tests()
