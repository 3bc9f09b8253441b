"""check_npu: build a graph for `npu` and compare the simulated outputs with the reference."""

import importlib.util
from pathlib import Path


def _shared():
    spec = importlib.util.spec_from_file_location("tests_conftest_npu", Path(__file__).parents[3] / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


assert_matches_reference = _shared().assert_matches_reference


def check_npu(graph, kernel=None, seed: int = 0, inputs=None):
    import akg

    kernel = kernel or akg.build(graph, target="npu")
    assert kernel.target.kind == "npu"
    return assert_matches_reference(graph, kernel, seed, inputs)
