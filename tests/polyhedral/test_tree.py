"""Schedule-tree mapping: register rows above several passes over the same rows (layer norm,
softmax) are distributed, one row loop per pass, and still compute the same values."""

import re

import numpy as np
import pytest
from tvm import tirx

from akg.compiler import pipeline_for
from akg.graph import GraphBuilder, evaluate, random_inputs
from akg.graph.pipeline import plan_model
from akg.polyhedral.tirstmt import buffers, loops
from akg.schedules.cpu import BandConfig, bands_of, cpu_config, switches_of
from akg.target import get_target


def _layer_norm(rows=64, cols=384):
    b = GraphBuilder("layer_norm")
    b.output(b.layer_norm(b.input("x", (rows, cols)), b.input("g", (cols,)), b.input("bt", (cols,)), epsilon=1e-5))
    return b.build()


def _mad_norm(rows=64, cols=384):
    # the mean, the mean absolute deviation around it, the output: two passes that only read
    b = GraphBuilder("mad")
    x = b.input("x", (rows, cols))
    c = b.sub(x, b.mean(x, axes=[1], keepdims=True))
    b.output(b.div(c, b.mean(b.abs(c), axes=[1], keepdims=True)))
    return b.build()


def _softmax(rows=64, cols=384):
    b = GraphBuilder("softmax")
    b.output(b.softmax(b.input("x", (rows, cols))))
    return b.build()


def _row_sum(rows=64, cols=384):
    b = GraphBuilder("row_sum")
    b.output(b.sum(b.input("x", (rows, cols)), axes=[1]))
    return b.build()


def _build(graph, register, tile=16, fusion="smart"):
    pipeline = pipeline_for(graph, get_target("cpu"), fusion)
    config = pipeline.default_config()
    band = bands_of(config)[0]
    config = cpu_config(fusion, (BandConfig(band.order, (tile,), (register,), False, False),), **switches_of(config))
    kernel = pipeline.build(config)
    inputs = random_inputs(graph, 5)
    got = kernel(*inputs.values())[0]
    np.testing.assert_allclose(got, evaluate(graph, inputs)[0], rtol=1e-4, atol=1e-5)
    return pipeline, kernel.tir()


def _row_loops(tir: str, rows: int) -> int:
    return len(re.findall(rf"for \w+(, \w+)* in (range\({rows}\)|T\.grid\({rows},)", tir))


@pytest.mark.parametrize("make, passes", [(_layer_norm, 2), (_mad_norm, 3), (_softmax, 4)],
                         ids=["layer_norm", "mad_norm", "softmax"])
def test_register_rows_above_several_passes_run_each_pass_over_the_block(make, passes):
    pipeline, tir = _build(make(), register=4)
    assert pipeline.bands[0].passes == passes
    # one loop over the 4 rows of the block per statement group under the sequence (the
    # per-row scalars, a mean or a reciprocal, get theirs too), none around all of them
    assert _row_loops(tir, 4) >= passes


def test_without_register_rows_the_passes_stay_fused_per_row():
    # tiles of 32 rows: the loop over the 2 tiles (serial: a 64-row layer norm is below the
    # parallel threshold) is not mistaken for a loop over 4 register rows
    _, tir = _build(_layer_norm(), register=0, tile=32)
    assert _row_loops(tir, 4) == 0


def test_one_pass_bands_are_not_distributed():
    pipeline, tir = _build(_row_sum(), register=2)
    assert pipeline.bands[0].passes == 1
    assert _row_loops(tir, 2) == 2  # the row block, and the copy of its 2 sums to the output


def test_distribution_under_maximal_fusion_is_correct():
    _build(_layer_norm(), register=8, fusion="max")
    _build(_softmax(), register=2, fusion="max")


def test_multi_pass_rows_run_one_at_a_time_the_next_prefetched_over_a_reading_pass():
    cpu = get_target("cpu")
    pipeline = pipeline_for(_mad_norm(4096, 1024), cpu, "smart")
    band = bands_of(pipeline.default_config())[0]
    assert band.register == (0,) and band.prefetch == 1
    # the next row's lines are prefetched over one of the passes that only read the row (its
    # mean's or deviation's), not over the output pass, whose stores they competed with
    func, _ = pipeline.lower(None)
    local = buffers(func.body, tirx.AllocBuffer)
    assert buffers(func.body) - local  # the output pass stores the output
    around = [f for f in loops(func.body) if f.kind == tirx.ForKind.SERIAL and "llvm.prefetch" in str(f.body)
              and any(g.kind == tirx.ForKind.VECTORIZED for g in loops(f.body))]
    spreading = [f for f in around if not any(g is not f and g.same_as(h) for g in around for h in loops(f.body))]
    assert len(spreading) == 1 and buffers(spreading[0].body) <= local, func
    softmax = pipeline_for(_softmax(4096, 1024), cpu, "smart")
    assert softmax.bands[0].row_writers == 2 and bands_of(softmax.default_config())[0].register == (0,)


def _padded_pool(output_pad: bool):
    b = GraphBuilder("pool")
    x = b.input("x", (1, 4, 10, 10))
    p = b.pad(x, before=[0, 0, 1, 1], after=[0, 0, 1, 1]) if output_pad else x
    y = b.max_pool2d(p, kernel=[3, 3], strides=[1, 1], padding=[0, 0] if output_pad else [1, 1])
    b.output(y, *([p] if output_pad else []))
    return b.build()


def test_a_padded_input_is_a_recomputable_producer_of_its_reader_only():
    # the pool's padded copy of its input (band 0) may run inside the pool's band; the copy's
    # own band has none, and a padded tensor that is also a kernel output must be stored whole
    bands = pipeline_for(_padded_pool(False), get_target("cpu")).bands
    assert bands[0].producers == () and bands[-1].producers == bands[0].statements
    bands = pipeline_for(_padded_pool(True), get_target("cpu")).bands
    assert all(b.producers == () for b in bands)


@pytest.mark.parametrize("stride", [1, 2])
def test_row_steps_name_the_member_that_steps_over_input_rows(stride):
    # a conv's output rows move its (padded) input's rows by the stride; its output channels
    # move the weight's first index by one; its output columns only move last indices
    b = GraphBuilder("conv")
    x = b.input("x", (1, 16, 32, 32))
    w = b.const(np.ones((32, 16, 3, 3), np.float32), name="w")
    b.output(b.conv2d(x, w, strides=[stride, stride], padding=[1, 1]))
    (band,) = [info for info in pipeline_for(b.build(), get_target("cpu")).bands if info.reduction_inner]
    rows = [m for m, extent in enumerate(band.extents) if extent == 32 // stride and band.image_axes[m] == 2]
    assert [band.row_steps[m] for m in rows] == [stride]
    assert max(band.row_steps) == stride


def test_a_padded_input_in_phases_is_an_image_split_by_its_rows():
    # a stem (3 -> 16 channels, 7x7/2 over 64 px) stores its padded input in phases of its
    # columns, [N, C, H, 2, W / 2]: the band that writes them sees its channels and rows as an
    # image's (so the cores split it by rows, as the conv that reads it), not its phase or
    # column
    b = GraphBuilder("stem")
    x = b.input("x", (1, 3, 64, 64))
    w = b.const(np.ones((16, 3, 7, 7), np.float32), name="w")
    b.output(b.conv2d(x, w, strides=[2, 2], padding=[3, 3]))
    bands = pipeline_for(b.build(), get_target("cpu")).bands
    (phases,) = [info for info in bands if not info.reduction_inner]
    if len(phases.extents) != 4:
        pytest.skip("this target stores no phases")
    assert sorted(phases.image_axes) == [-1, -1, 1, 2]
    rows = phases.image_axes.index(2)
    assert phases.extents[rows] == 64 + 6


def test_reduction_outer_is_the_reduction_loop_not_the_band_of_its_initialisation():
    # the init of a reduction sunk below its band keeps a band of one point (at 0) that
    # carries no loop: a matmul's reduction outer loop is its K
    b = GraphBuilder("matmul")
    b.output(b.matmul(b.input("a", (64, 96)), b.input("w", (96, 32))))
    (band,) = pipeline_for(b.build(), get_target("cpu")).bands
    assert band.reduction_inner and band.reduction_outer == 96


def test_a_winograd_transform_is_no_image():
    # the product of a 3x3 conv run as Winograd writes [4, 4, K, rows, cols]: a 5-d tensor that
    # is no image in phases, so no member walks an image's rows or channels; its reduction
    # (input channels) is 64 long
    b = GraphBuilder("conv")
    x = b.input("x", (1, 64, 28, 28))
    b.output(b.conv2d(x, b.const(np.ones((64, 64, 3, 3), np.float32), name="w"), padding=[1, 1]))
    target = get_target("cpu")
    kernels = {k.name.split(".")[-1]: k for k in plan_model(b.build(), target).kernels}
    product = [k for name, k in kernels.items() if "winograd_product" in name]
    if not product:
        pytest.skip("this target runs no Winograd convs")
    (band,) = pipeline_for(product[0].subgraph.graph, target).bands
    assert band.image_axes == (-1,) * band.members
    assert band.reduction_outer == 64


def test_shift_to_origin_starts_every_member_at_zero_and_keeps_its_flags():
    import islpy as isl

    from akg.polyhedral import tree

    # a skewed band (isl's schedule of a pad reading an exp over 1x1x1): its members run -1..1
    s = isl.Schedule.read_from_str(isl.Context(), (
        '{ domain: "{ S2[i0, i1, i2] : 0 <= i0 <= 1 and 0 <= i1 <= 1 and 0 <= i2 <= 1; S0[0, 0, 0] }", '
        'child: { schedule: "[{ S2[i0, i1, i2] -> [(i0 - i1)]; S0[i0, i1, i2] -> [(0)] }, '
        '{ S2[i0, i1, i2] -> [(i0 - i2)]; S0[i0, i1, i2] -> [(0)] }]", permutable: 1, coincident: [ 1, 1 ] } }'))
    node = s.get_root().child(0)
    assert tree.band_extents(node) == (3, 3)
    shifted = tree.shift_to_origin(node)
    image = isl.Set.from_union_set(shifted.band_get_partial_schedule_union_map()
                                   .intersect_domain(shifted.get_domain()).range())
    assert [image.dim_min_val(d).to_python() for d in range(2)] == [0, 0]
    assert tree.band_extents(shifted) == (3, 3) and tree.band_coincident(shifted) == [True, True]
    assert shifted.band_get_permutable()
    assert tree.shift_to_origin(shifted).band_get_partial_schedule().plain_is_equal(
        shifted.band_get_partial_schedule())  # already at the origin: unchanged
