"""The test-only target `testsim` (sim_target.py), registered for the tests in this folder;
`check_kernel` here builds for it instead of the host CPU."""

import importlib.util
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import sim_target  # noqa: E402  (registers the target and its backend)


def _shared_conftest():
    spec = importlib.util.spec_from_file_location("tests_conftest", Path(__file__).parents[1] / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


assert_matches_reference = _shared_conftest().assert_matches_reference


def build_and_check(graph, kernel=None, seed: int = 0, inputs=None):
    """The kernel test suite's check (tests/conftest.py), with kernels built for testsim."""
    import akg

    kernel = kernel or akg.build(graph, target=sim_target.KIND)
    assert kernel.target.kind == sim_target.KIND
    return assert_matches_reference(graph, kernel, seed, inputs)


@pytest.fixture(name="check_kernel", scope="session")
def sim_check_kernel():
    return build_and_check
