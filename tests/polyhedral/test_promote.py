"""polyhedral/promote.py: the local buffer layouts of promotions (blocked panels, permuted
accumulators); the promotion decisions themselves are exercised through every kernel test."""

from tvm import tirx

from akg.polyhedral.promote import local_index


def test_identity_layouts_leave_the_index_alone():
    assert local_index([1, 2, 3], 0) == [1, 2, 3]
    assert local_index([1, 2, 3], ()) == [1, 2, 3]


def test_a_blocked_layout_moves_the_last_dim_first_and_keeps_its_remainder_last():
    assert local_index([4, 64], 16) == [4, 4, 16]  # sizes: 64 columns as 4 blocks of 16
    i = tirx.Var("i", "int32")
    j = tirx.Var("j", "int32")
    first, row, last = local_index([i, j], 16)
    assert str(first) == str(tirx.floordiv(j, 16)) and row.same_as(i) and str(last) == str(tirx.floormod(j, 16))


def test_a_permutation_puts_the_vector_dim_last():
    # a conv's accumulators [b, f, y, x] vectorised over f: kept as [b, y, x, f]
    assert local_index([1, 32, 1, 7], (0, 2, 3, 1)) == [1, 1, 7, 32]
    assert local_index(["b", "f", "y", "x"], (0, 2, 3, 1)) == ["b", "y", "x", "f"]


# The q/k/v projection of a torch transformer layer as aot_autograd hands it over: isl skews the
# fused nest (10 x 38 loops for a 10 x 48 matmul) and guards the statements inside, while the
# promoted permute_1 is copied out at the mark; the copy ran in every iteration, also where no
# element was computed, and wrote out of bounds (heap corruption in the torch.compile training
# test). Copies now run only where the loops around the mark touch the tensor.
QKV = """
graph @qkv(%x: f32[2,5,16], %w: f32[48,16], %b: f32[48]) {
  %view = reshape(%x) {shape=[10, 16]} : f32[10,16]
  %mm = matmul(%view, %w) {transpose_b=true} : f32[10,48]
  %addmm = add(%mm, %b) : f32[10,48]
  %v1 = reshape(%addmm) {shape=[2, 5, 48]} : f32[2,5,48]
  %q, %k, %v = split(%v1) {axis=2, sizes=[16, 16, 16]} : f32[2,5,16], f32[2,5,16], f32[2,5,16]
  %q4 = reshape(%q) {shape=[2, 5, 2, 8]} : f32[2,5,2,8]
  %qt = transpose(%q4) {perm=[0, 2, 1, 3]} : f32[2,2,5,8]
  %k4 = reshape(%k) {shape=[2, 5, 2, 8]} : f32[2,5,2,8]
  %v4 = reshape(%v) {shape=[2, 5, 2, 8]} : f32[2,5,2,8]
  %vt = transpose(%v4) {perm=[0, 2, 1, 3]} : f32[2,2,5,8]
  %kt = transpose(%k4) {perm=[0, 2, 3, 1]} : f32[2,2,8,5]
  %q3 = reshape(%qt) {shape=[4, 5, 8]} : f32[4,5,8]
  %k3 = reshape(%kt) {shape=[4, 8, 5]} : f32[4,8,5]
  %v3 = reshape(%vt) {shape=[4, 5, 8]} : f32[4,5,8]
  return %view, %qt, %k4, %vt, %q3, %k3, %v3
}
"""


def test_promoted_copies_stay_inside_the_iterations_that_touch_the_tensor():
    import sys
    from pathlib import Path

    import numpy as np

    from akg.compiler import build
    from akg.graph import random_inputs
    from akg.graph.io.mir import parse_mir
    from akg.graph.interpreter import evaluate
    from akg.graph.pipeline import plan_model
    from akg.target import get_target

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "targets"))
    from tir_interp import interpret  # bounds-checked: an access outside a buffer raises

    target = get_target("cpu")
    graph = parse_mir(QKV)
    inputs = random_inputs(graph, seed=0)
    want = dict(zip([v.name for v in graph.outputs], evaluate(graph, inputs)))
    for sg in plan_model(graph, target).subgraphs:
        kernel = build(sg, target)
        program = kernel.program
        ins = [np.asarray(inputs[t.name]) if t.name in inputs else None for t in program.inputs]
        assert all(a is not None for a in ins), "the test expects one kernel over the model's inputs"
        outs = [np.full(t.shape, np.nan, t.dtype) for t in program.outputs]
        interpret(kernel.func, [*ins, *(np.array(a) for a in program.params.values()), *outs])
        for t, got in zip(program.outputs, outs):
            np.testing.assert_allclose(got, want[t.name], rtol=1e-5, atol=1e-5, err_msg=t.name)


def test_recompute_boxes_stay_inside_the_tensors_they_read():
    # a strided depthwise conv computing its padded input (in phases of its columns) per cache
    # tile, with partial tiles of rows and channels and the boxes' rows rounded up to whole
    # vectors: run by the bounds-checked TIR interpreter, no access leaves its buffer
    import sys
    from dataclasses import replace
    from pathlib import Path

    import numpy as np

    from akg.compiler import pipeline_for
    from akg.graph import GraphBuilder, evaluate, random_inputs
    from akg.schedules.cpu import bands_of, cpu_config, switches_of
    from akg.target import get_target

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "targets"))
    from tir_interp import interpret

    b = GraphBuilder("dw")
    x = b.input("x", (1, 6, 11, 11))
    b.output(b.relu(b.conv2d(x, b.input("w", (6, 1, 3, 3)), strides=[2, 2], padding=[1, 1], groups=6)))
    graph = b.build()
    pipeline = pipeline_for(graph, get_target("cpu"))
    default = pipeline.default_config()
    *rest, conv = bands_of(default)
    conv = replace(conv, tile=(4, 4, 0), register=(2, 4, 0), sink=True, recompute=True)  # rows, channels, columns
    kernel = pipeline.build(cpu_config(default.fusion, (*rest, conv), **switches_of(default)))
    assert "_pad_local" in kernel.tir() and "_pad = " not in kernel.tir()
    inputs = random_inputs(graph, 0)
    program = kernel.program
    ins = [np.asarray(inputs[t.name]) for t in program.inputs]
    outs = [np.full(t.shape, np.nan, t.dtype) for t in program.outputs]
    interpret(kernel.func, [*ins, *(np.array(a) for a in program.params.values()), *outs])
    np.testing.assert_allclose(outs[0], evaluate(graph, inputs)[0], rtol=1e-5, atol=1e-5)


def test_a_reductions_init_and_epilogue_share_its_promoted_accumulators():
    # a conv tiled one output row at a time, all its channels, no register tile (the default of
    # a 16-channel conv at 8 px): its initialisation, the reduction and the epilogue sit at one
    # point of the band, ordered by a sequence under the promotion mark; the AST keeps them in
    # one piece, so the accumulators start at zero in the local buffer and the epilogue reads
    # them there: the conv's output never goes through memory (no global buffer, no copies)
    import re
    from dataclasses import replace

    import numpy as np

    from akg.compiler import pipeline_for
    from akg.graph import GraphBuilder, evaluate, random_inputs
    from akg.schedules.cpu import bands_of, cpu_config, switches_of
    from akg.target import get_target

    b = GraphBuilder("conv")
    w = b.const(np.random.default_rng(0).standard_normal((16, 16, 3, 3)).astype(np.float32), name="w")
    y = b.conv2d(b.input("x", (2, 16, 8, 8)), w, strides=[1, 1], padding=[1, 1])
    b.output(b.relu(b.add(y, b.input("bias", (1, 16, 1, 1)))))
    graph = b.build()
    pipeline = pipeline_for(graph, get_target("cpu"), "smart")
    default = pipeline.default_config()
    *rest, conv = bands_of(default)
    n = len(conv.order)
    conv = replace(conv, order=tuple(range(n)), tile=(1, 0, 1, 0)[-n:], register=(0,) * n, sink=True, parallel=False)
    kernel = pipeline.build(cpu_config(default.fusion, (*rest, conv), **switches_of(default)))
    tir = kernel.tir()
    # the only buffers in memory: the padded input, and the conv's accumulators in a local one
    globals_ = [m for m in re.findall(r"(\w+) = T.alloc_buffer", tir) if not m.endswith(("_local", "_pad"))]
    assert globals_ == [], tir
    inputs = random_inputs(graph, 0)
    np.testing.assert_allclose(kernel(**inputs)[0], evaluate(graph, inputs)[0], rtol=1e-4, atol=1e-4)


def test_an_initialisation_fixed_in_the_reductions_loop_stays_before_it():
    # a register-tiled conv whose reduction band runs its initialisation at 0 of the reduction's
    # outer loop: the statements at one band point are not grouped for such a schedule
    # (`_fixed_in_varying_member`), so the initialisation runs before the loop, not under a
    # guard inside it
    import re

    import numpy as np

    from akg.compiler import pipeline_for
    from akg.graph import GraphBuilder, evaluate, random_inputs
    from akg.polyhedral.astgen import _fixed_in_varying_member
    from akg.target import get_target

    b = GraphBuilder("conv")
    w = b.const(np.random.default_rng(0).standard_normal((16, 16, 3, 3)).astype(np.float32), name="w")
    b.output(b.conv2d(b.input("x", (1, 16, 32, 32)), w, strides=[1, 1], padding=[1, 1]))
    graph = b.build()
    pipeline = pipeline_for(graph, get_target("cpu"), "smart")
    config = pipeline.default_config()
    schedule = pipeline.recipe.apply(config, pipeline.model, pipeline.schedule, pipeline.bands, pipeline.dtype)
    assert _fixed_in_varying_member(schedule)
    kernel = pipeline.build(config)
    assert not re.search(r"if c\d+ == 0:", kernel.tir()), kernel.tir()
    inputs = random_inputs(graph, 0)
    np.testing.assert_allclose(kernel(**inputs)[0], evaluate(graph, inputs)[0], rtol=1e-4, atol=1e-4)
