"""The kernel test suite (tests/akg/test_build.py) on `npu`: every kernel either matches the
reference in the simulator or raises a typed "not supported yet" error (never a wrong
result). Slow: the suite's random shapes compile many kernels."""

import importlib.util
from pathlib import Path

import pytest

from akg.errors import CompileError, ScheduleError

from conftest_npu import assert_matches_reference

_spec = importlib.util.spec_from_file_location("kernel_suite", Path(__file__).parents[3] / "targets" / "kernel_suite.py")
_suite = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_suite)

pytestmark = pytest.mark.slow


def npu_check(graph, kernel=None, seed: int = 0, inputs=None):
    import akg

    try:
        kernel = kernel or akg.build(graph, target="npu")
    except (CompileError, ScheduleError) as e:
        pytest.skip(f"not mapped on npu: {type(e).__name__}: {str(e)[:200]}")
    return assert_matches_reference(graph, kernel, seed, inputs)


@pytest.fixture(name="check_kernel", scope="session")
def npu_check_kernel():
    return npu_check


globals().update(_suite.suite_tests())
