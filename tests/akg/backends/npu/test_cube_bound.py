"""The attainable bound of a contraction (per-core GM rate, L1 and L0C capacities) next to the
cube roofline, and the recipe's cube tiling: block order by shared operands, tiles fitted to
the buffers."""

import pytest

import akg
from akg.backends.npu.report import contraction_bound
from akg.backends.npu.spec import get_spec
from akg.graph import GraphBuilder

SPEC = get_spec()


def test_bound_of_1024_cubed_is_its_per_core_operand_reads():
    b = contraction_bound(SPEC, 1024, 1024, 1024)
    assert b.cube == 1024 ** 3 / (4096 * 32)  # 8192 cycles
    # 32 per-core regions of 256 x 128 (or 128 x 256): each core reads its A rows and B columns
    # once, (256 + 128) x 1024 x 2 bytes at 64 bytes/cycle
    assert b.reads == pytest.approx((256 + 128) * 1024 * 2 / 64)
    assert b.limit == "per-core GM reads" and b.bound == b.reads
    assert b.fraction(2 * b.bound) == pytest.approx(0.5)


def test_bound_grows_when_the_panels_do_not_fit_l1_and_l0c():
    b = contraction_bound(SPEC, 512, 4608, 4608)
    # a core's 512 x 144 region (1 x 32 cores) does not fit L0C as one C tile, nor its B
    # columns (4608 x 144 fp16 = 1.3 MiB) in half of L1: two 256 x 144 C tiles, B read twice
    assert b.reads == pytest.approx((512 * 4608 + 2 * 4608 * 144) * 2 / 64)
    assert b.bound > b.cube and "256x144" in b.tiling
    bigger = contraction_bound(SPEC.__class__(**{**SPEC.to_dict(), "l1_bytes": 8 << 20}), 512, 4608, 4608)
    assert bigger.reads < b.reads  # a larger L1 keeps a panel: less traffic


def test_bound_of_a_convolution_counts_the_input_map_not_its_im2col():
    im2col = contraction_bound(SPEC, 256, 16 * 196, 2304)
    conv = contraction_bound(SPEC, 256, 16 * 196, 2304, 256 * 14 * 14 * 2 / 196)
    assert conv.reads < im2col.reads and conv.limit == "cube"


def matmul(m, k, n):
    b = GraphBuilder("mm")
    b.output(b.matmul(b.input("a", (m, k), "float16"), b.input("b", (k, n), "float16")))
    return b.build()


def test_default_matmul_tiles_fill_l0c_and_waves_share_operands():
    """512 x 4608 x 4608: 256 x 144 tiles (2 x 32 blocks); the grid runs m fastest so two
    cores of a wave read each B tile (an L2 hit for one of them)."""
    from akg.graph.pipeline import plan_model
    from akg.schedules.npu_band import band_plans
    from akg.target import get_target
    from akg.tuner.task import TuningTask

    target = get_target("npu")
    g = matmul(512, 4608, 4608)
    task = TuningTask(plan_model(g, target).kernels[0].subgraph, target)
    kernel = akg.build(g, target=target)
    program = kernel.executable.program
    assert program.grid == (32, 2)  # n blocks outer, m blocks inner: a wave covers both m tiles
    plan = band_plans(kernel.config, list(task.space().infos))[0]
    assert plan.tile == (256, 144) and plan.grid == (2, 32)


@pytest.mark.slow
def test_matmul_1024_reaches_75_percent_of_its_attainable_bound():
    from akg.backends.npu.sim import simulate

    kernel = akg.build(matmul(1024, 1024, 1024), target="npu")
    exe = kernel.executable
    rep = simulate(exe.program, exe.spec, functional=False, races=False).report
    assert contraction_bound(exe.spec, 1024, 1024, 1024).fraction(rep.cycles) >= 0.75
