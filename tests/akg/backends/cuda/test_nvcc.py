"""Every kernel compiles for the GPU without one: TVM's CUDA C of the mapped kernel is built
into a cubin by nvcc for the target's arch, with its resources (registers, shared memory,
spills) read from ptxas. The default run compiles the kernel families of issue 18; `-m slow`
compiles the whole kernel test suite for sm_80 and the families for sm_90."""

import re
import shutil

import pytest

import akg

import cuda_suite
from test_emulate import FAMILIES, _graph

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")


def _compile(graph, target="cuda"):
    kernel = akg.build(graph, target=target)
    exe = kernel.executable
    assert exe.cubin[:4] == b"\x7fELF", "nvcc made no cubin"
    assert exe.arch == kernel.target.arch and len(exe.kernels) == len(exe.launches) >= 1
    assert set(exe.resources) == set(exe.kernels)
    for name, launch in zip(exe.kernels, exe.launches):
        bounds = re.search(rf"void (?:__launch_bounds__\((\d+)\) )?{name}\(", exe.source)
        assert bounds is not None and int(bounds.group(1) or 1) == launch.threads
        assert 0 < exe.resources[name].registers <= 255
    return kernel


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_kernel_families_compile_with_nvcc(family):
    kernel = _compile(_graph(FAMILIES[family]))
    if family != "full_sum":
        assert "threadIdx.x" in kernel.source("source")


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_kernel_families_compile_for_sm90(family):
    _compile(_graph(FAMILIES[family]), "cuda-sm90")


def _nvcc_check(graph, kernel=None, seed: int = 0, inputs=None):
    return _compile(graph)


@pytest.fixture(name="check_kernel", scope="session")
def nvcc_check_kernel():
    return _nvcc_check


_SUITE = {name: pytest.mark.slow(fn) for name, fn in cuda_suite.suite_tests().items()}
globals().update(_SUITE)
