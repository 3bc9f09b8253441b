"""Contractions on the cube: the multiply-accumulate found in the schedule (no per-operator
template), tiled m x n x k by the recipe, GM -> L1 -> L0A/L0B -> mmad (fp32 in L0C) -> UB
epilogue -> GM; outputs against the NumPy reference, the race detector on."""

import pytest

import akg
from akg.graph import GraphBuilder

from conftest_npu import check_npu


def graph(build, name="mm"):
    b = GraphBuilder(name)
    build(b)
    return b.build()


def mm(m, n, k, epilogue=True, transpose_a=False, transpose_b=False, batch=None, dtype="float16"):
    def build(b):
        lead = (batch,) if batch else ()
        x = b.input("x", lead + ((k, m) if transpose_a else (m, k)), dtype)
        w = b.input("w", lead + ((n, k) if transpose_b else (k, n)), dtype)
        op = "batch_matmul" if batch else "matmul"
        y = b.op(op, x, w, transpose_a=transpose_a, transpose_b=transpose_b)
        if epilogue:
            y = b.op("relu", b.add(y, b.input("bias", (n,), dtype)))
        b.output(y)
    return graph(build)


def check_cube(g):
    k = check_npu(g)
    text = k.target.backend().source(k.executable)
    assert "mmad" in text and "dma.MTE1" in text
    report = k.target.backend().report(k.executable, races=True)  # NpuRaceError on a missing sync
    assert report.pipe_busy["M"] > 0
    return k, report


@pytest.mark.parametrize("make", [
    lambda: mm(64, 48, 96),
    lambda: mm(64, 48, 96, epilogue=False),
    lambda: mm(64, 64, 128, transpose_b=True),
    lambda: mm(64, 32, 64, transpose_a=True),
    lambda: mm(32, 48, 64, batch=3),
], ids=["bias_relu", "plain", "transposed_b", "transposed_a", "batch"])
def test_matmul_on_the_cube(make):
    check_cube(make())


def test_matmul_256_tiles_k_and_splits_over_a_grid():
    k, report = check_cube(mm(256, 256, 256))
    p = k.executable.program
    assert p.blocks > 1
    assert "mmad" in k.target.backend().source(k.executable)


def test_fp32_matmul_is_kept_off_the_cube():
    g = mm(32, 16, 32, dtype="float32")
    k = check_npu(g)  # small: the vector path, exact
    assert "mmad" not in k.target.backend().source(k.executable)



def test_fp32_matmul_tiles_the_reduction_on_the_vector_path():
    """The mlp's first layer (784 -> 256, fp32): its weights (800 KB) do not fit the UB, so
    the vector path runs K in tiles (operands ping-ponged per tile, partial sums in UB)."""
    k = check_npu(mm(32, 256, 784, dtype="float32"))  # rtol 1e-5 against the reference
    text = k.target.backend().source(k.executable)
    assert "mmad" not in text and "for k" in text
    report = k.target.backend().report(k.executable, races=True)  # NpuRaceError on a missing sync
    assert report.high_water["UB"] <= report.capacity["UB"]


def test_cross_entropy_selects_by_label():
    """select(label == index, 1, 0) as an exact indicator on the vector unit; loopless
    statements (the mean) as one-element regions."""
    g = graph(lambda b: b.output(b.op("cross_entropy", b.input("x", (32, 10)), b.input("labels", (32,), "int32"))))
    k = check_npu(g)
    k.target.backend().report(k.executable, races=True)


@pytest.mark.slow
def test_matmul_1024_roofline():
    from akg.backends.npu.sim import simulate

    k = akg.build(mm(1024, 1024, 1024, epilogue=False), target="npu")
    exe = k.executable
    rep = simulate(exe.program, exe.spec, functional=False, races=False).report
    ideal = exe.spec.roofline(2 * 1024 ** 3, 0, 3 * 1024 * 1024 * 2)
    assert ideal.fraction(rep.cycles) > 0.15, (rep.cycles, ideal)
