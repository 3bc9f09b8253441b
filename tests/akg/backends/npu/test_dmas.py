"""GM <-> UB copies of a region's boxes (`akg.backends.npu.dmas`): a select's unchosen branch
(a concat's or a padding's input, fused with its consumer) whose box reaches past its tensor by
a part of a 32-byte block. Its part inside the tensor belongs at an unaligned UB offset, which no
DMA may write: it goes by way of a GM workspace (GM addresses need no alignment). Each kernel
against the reference with the race detector on."""

import pytest

from akg.graph import GraphBuilder

from conftest_npu import check_npu


def graph(build, name="k"):
    b = GraphBuilder(name)
    build(b)
    return b.build()


def conv1x1_padded():
    """/tmp/fuzz/legal/conv1x1.mir: a 1x1 conv of a 1x1 image padded by 2; the padding and
    the conv are one loop nest, so the padded input stays in UB and x[0] belongs at its
    element (2, 2), 18 floats (72 bytes) into its box."""
    return graph(lambda b: b.output(b.conv2d(b.input("x", (1, 1, 1, 1)), b.input("w", (3, 1, 1, 1)),
                                             padding=[2, 2])))


def concat_exp(shapes, dtype="float32"):
    def build(b):
        xs = [b.input(f"x{i}", s, dtype) for i, s in enumerate(shapes)]
        b.output(b.exp(b.concat(*xs, axis=len(shapes[0]) - 1)))
    return graph(build)


def pad_exp(shape, before, after):
    return graph(lambda b: b.output(b.exp(b.pad(b.input("x", shape), before=before, after=after, value=0.0))))


def check(g):
    k = check_npu(g)
    backend = k.target.backend()
    report = backend.report(k.executable, races=True)  # NpuRaceError on a missing sync
    assert report.cycles > 0
    return k, backend.source(k.executable)


@pytest.mark.parametrize("make", [
    conv1x1_padded,
    lambda: concat_exp([(3,), (17,)]),
    lambda: concat_exp([(64, 3), (64, 17)]),
    lambda: concat_exp([(2048, 5), (2048, 27)], "float16"),
    lambda: concat_exp([(5, 7, 3), (5, 7, 6)]),
    lambda: pad_exp((4, 5), [1, 3], [0, 0]),
    lambda: pad_exp((256, 37), [0, 3], [0, 4]),
], ids=["conv1x1_pad2", "concat_1d", "concat_rows", "concat_fp16_blocks", "concat_3d", "pad_2d", "pad_blocks"])
def test_unaligned_part_of_a_select_branch_goes_by_way_of_gm(make):
    k, text = check(make())
    assert "_shift_ws" in text  # the part written to its place in GM, the box brought back


def test_shifted_part_under_double_buffering_uses_a_workspace_slot_per_half():
    k, text = check(pad_exp((32768, 13), [0, 1], [0, 2]))
    assert "for j in 0..2" in text and "_shift_ws" in text
    ws = next(b for b in k.executable.program.params if "_shift_ws" in b.name)
    assert ws.shape[0] % (2 * k.executable.program.blocks) == 0  # a slot per block and half


def test_aligned_part_of_a_select_branch_is_brought_in_directly():
    """A box that reaches past its tensor by whole 32-byte blocks keeps its one DMA."""
    _k, text = check(concat_exp([(64, 8), (64, 24)]))
    assert "_shift_ws" not in text
