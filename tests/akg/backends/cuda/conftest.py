"""The CUDA tests share the kernel suite's loader (`cuda_suite.py`, beside this file)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def _shared_conftest():
    import importlib.util

    spec = importlib.util.spec_from_file_location("tests_conftest_cuda", Path(__file__).parents[3] / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules["tests_conftest_cuda"] = module
    return module


_shared_conftest()
