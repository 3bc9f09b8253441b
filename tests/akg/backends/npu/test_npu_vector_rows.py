"""NPU vector mapping of row-wise kernels (issue 14's softmax / layer_norm benchmark): rows one
per 32-byte block (one instruction over eight rows), row reductions by `reduce_*_across` +
`reduce_*_block`, work a later statement repeats done once, reductions written straight into
their results, the core split on the band member with the most tiles, and tiles sized by the
UB footprint model. Every kernel is checked against the NumPy reference and for races."""

import akg
from akg.graph import GraphBuilder
from akg.schedules.space import Config, Step

from conftest_npu import check_npu


def graph(build, name="k"):
    b = GraphBuilder(name)
    build(b)
    return b.build()


def layer_norm16(rows=256, cols=1024):
    return graph(lambda b: b.output(b.op("layer_norm", b.input("x", (rows, cols), "float16"),
                                         b.input("g", (cols,), "float16"), b.input("bb", (cols,), "float16"))))


def softmax16(shape):
    return graph(lambda b: b.output(b.op("softmax", b.input("x", shape, "float16"))))


def checked(g, config=None):
    k = check_npu(g, kernel=akg.build(g, target="npu", config=config) if config else None)
    k.target.backend().report(k.executable, races=True)  # raises NpuRaceError on a missing sync
    return k, k.target.backend().source(k.executable)


def test_layer_norm_rows_per_block_and_work_done_once():
    k, text = checked(layer_norm16())
    lines = text.splitlines()
    # the default tile holds 8 rows: every fp32 pass over them is one instruction
    assert "tile(0, UB, [8])" in str(k.config)
    # the input is cast to float32 once per tile, not once per statement (mean, variance, output)
    assert len([ln for ln in lines if "v.cast tmp_float32" in ln and "x_ub" in ln]) == 1
    # x - mean once (the variance's and the output's), eight rows a repeat with a value per block
    subs = [ln for ln in lines if "v.sub " in ln]
    assert len(subs) == 1 and "bcast(" in subs[0] and ",1,0)" in subs[0]
    # row sums: across the row's blocks then one value per block, written straight into the sums
    assert any("reduce_sum_block t0_mean_sum" in ln for ln in lines)
    assert not any("v.dup t0_mean_sum" in ln or "v.dup t0_var_sum" in ln for ln in lines)


def test_partial_row_group_under_a_mask():
    """12 rows: one full group of eight and one of four under a mask of four blocks."""
    cfg = Config("smart", (Step("tile", 0, "UB", (12,)), Step("map", 0, "cores", (4,)), Step("promote", None, "UB", 1)))
    _k, text = checked(layer_norm16(48, 256), cfg)
    assert "mask=32" in text  # four blocks of eight float32 lanes


def test_softmax_blocks_split_the_member_with_most_tiles():
    """(2, 4, 64, 512) tiled (1, 16, 1): 4 row tiles against 2 and 4 images; (2, 4, 256, 512)
    tiled (1, 8, 1): 32 row tiles, all 32 cores (the first member has only 2 or 4)."""
    k, _ = checked(softmax16((2, 4, 256, 512)),
                   Config("smart", (Step("tile", 0, "UB", (1, 8, 1)), Step("map", 0, "cores", (32,)),
                                    Step("promote", None, "UB", 2))))
    assert k.target.backend().report(k.executable).blocks == 32


def test_footprint_model_keeps_cores_busy():
    """A larger tile from the footprint model only where it leaves as many blocks."""
    k, _ = checked(graph(lambda b: b.output(b.op("max", b.input("x", (64, 512), "float16"), axes=[1]))))
    assert k.target.backend().report(k.executable).blocks >= 4


def test_cube_tile_in_row_chunks_with_b_panel_in_l1():
    """A 256 x 128 cube tile over 16 K steps: two row chunks, B's panel loaded once by the
    first, the first chunk's rows written to GM a slice per K step of the second, the last
    chunk written out in column chunks."""
    g = graph(lambda b: b.output(b.matmul(b.input("a", (1024, 512), "float16"), b.input("b", (512, 1024), "float16"))))
    k, text = checked(g)
    assert "t0_acc_ub1_r0" in text or "_r0_ub" in text
    assert sum(1 for ln in text.splitlines() if "dma.MTE2 b_" in ln) == 1  # B's panel: one load loop
    assert "_c1_ub" in text  # the last chunk's write-out in column chunks
