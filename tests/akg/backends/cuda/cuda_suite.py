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


def graph_of(body):
    """The graph `body(b)` builds on a GraphBuilder named k."""
    from akg.graph import GraphBuilder

    b = GraphBuilder("k")
    body(b)
    return b.build()


def check_emulated(graph, kernel):
    """`kernel` (a cuda-emu build of `graph`) matches the reference on random inputs."""
    from tests_conftest_cuda import assert_matches_reference

    return assert_matches_reference(graph, kernel, 0, None)
