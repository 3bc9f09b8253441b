"""Scheduling: fusion strategies, the operation quota fallback, tree normalisation."""

import logging
from types import SimpleNamespace

import akg.polyhedral.schedule as sched
from akg.graph import GraphBuilder
from akg.graph.compute.lower import lower_graph
from akg.polyhedral.deps import compute_dependences
from akg.polyhedral.model import build_model
from akg.polyhedral.schedule import _determined, respects, schedule
from akg.polyhedral.bands import analyze, outer_band_paths
from akg.polyhedral.tree import all_bands


def _softmax_after_matmul():
    b = GraphBuilder("g")
    x = b.input("x", (16, 40))
    b.output(b.softmax(b.matmul(x, b.input("w", (40, 24)))))
    m = build_model(lower_graph(b.build()))
    return m, compute_dependences(m)


def test_fusion_strategies_differ_and_all_respect_dependences():
    m, d = _softmax_after_matmul()
    bands = {}
    for fusion in ("max", "smart", "none"):
        result = schedule(m, d, fusion)
        assert result.fallback is None
        assert respects(result.schedule, d)
        bands[fusion] = len(outer_band_paths(result.schedule))
    assert bands["none"] == len(m.statements)  # one loop nest per statement
    assert bands["smart"] < bands["none"]


def test_quota_falls_back_to_sequential_schedule_and_says_so(caplog):
    m, d = _softmax_after_matmul()
    with caplog.at_level(logging.INFO, logger="akg.polyhedral.schedule"):
        result = schedule(m, d, "smart", max_operations=50)
    assert result.fallback == "isl operation quota exceeded"
    assert "using the sequential schedule" in caplog.text
    assert respects(result.schedule, d)


def test_slow_scheduler_is_stopped_by_the_time_limit():
    """Attention's context kernel under maximal fusion keeps isl busy for minutes with few
    (but slow) operations; the limit on its CPU time stops it and the schedule falls back."""
    b = GraphBuilder("g")
    ctx = b.batch_matmul(b.input("p", (12, 128, 128)), b.input("v", (12, 128, 64)))
    b.output(b.reshape(b.transpose(ctx, perm=[1, 0, 2]), shape=[128, 768]))
    m = build_model(lower_graph(b.build()))
    d = compute_dependences(m)
    result = schedule(m, d, "max", max_seconds=0.3)
    assert result.fallback == "isl scheduler took over 0.3 s of CPU time"
    assert respects(result.schedule, d)


def test_slow_wall_clock_does_not_stop_the_scheduler(monkeypatch):
    """On a loaded host the child gets a fraction of a CPU: the limit is on its CPU time, so a
    wall clock running far ahead of it (here each reading a second later) does not drop the
    kernel to the sequential schedule; the wall-clock backstop is WALL_FACTOR times longer."""
    clock = iter(range(0, 1_000_000))
    monkeypatch.setattr(sched, "time", SimpleNamespace(monotonic=lambda: float(next(clock))))
    m, d = _softmax_after_matmul()
    result = schedule(m, d, "smart", max_seconds=2.0)
    assert result.fallback is None
    monkeypatch.setattr(sched, "_cpu_seconds", lambda pid: 0.0)  # a child that never runs
    monkeypatch.setattr(sched, "select", SimpleNamespace(select=lambda r, w, x, timeout: ([], [], [])))
    result = schedule(m, d, "smart", max_seconds=2.0)
    assert result.fallback == "isl scheduler ran over 20 s (wall clock) with under 2 s of CPU time"


def test_schedule_computed_in_a_child_matches_the_direct_one():
    m, d = _softmax_after_matmul()
    forked = schedule(m, d, "smart")
    direct = schedule(m, d, "smart", max_seconds=None)
    assert forked.fallback is None and forked.schedule.plain_is_equal(direct.schedule)


def test_reduction_band_is_split_from_parallel_band():
    b = GraphBuilder("g")
    b.output(b.sum(b.input("x", (8, 32)), axes=[1]))
    m = build_model(lower_graph(b.build()))
    result = schedule(m, compute_dependences(m))
    (info,) = analyze(m, result.schedule)
    assert info.coincident == (True,) and info.reduction_inner


def test_a_head_merging_member_counts_as_contiguous():
    # attention context: batch_matmul, heads moved next to the rows, heads merged into one
    # axis; the merged member (64 * head + d) streams the value rows and the output
    b = GraphBuilder("ctx")
    ctx = b.batch_matmul(b.input("p", (4, 32, 32)), b.input("v", (4, 32, 16)))
    b.output(b.reshape(b.transpose(ctx, perm=[1, 0, 2]), shape=[32, 64]))
    m = build_model(lower_graph(b.build()))
    (info,) = analyze(m, schedule(m, compute_dependences(m)).schedule)
    merged = max(range(len(info.extents)), key=lambda d: info.extents[d])
    assert info.extents[merged] == 64 and info.reduction_inner
    assert info.contiguity[merged] >= info.inner_contiguity  # so the register tile sinks


def _context_of_heads(batch=2, heads=4, seq=16, d=16):
    """An attention's context product with its heads merged back into the hidden dim, the way
    MindSpore writes it: (b, h, s, s) x (b, h, s, d) -> transpose (b, s, h, d) -> (b * s, h * d)."""
    b = GraphBuilder("ctx4")
    ctx = b.batch_matmul(b.input("p", (batch, heads, seq, seq)), b.input("v", (batch, heads, seq, d)))
    b.output(b.reshape(b.transpose(ctx, perm=[0, 2, 1, 3]), shape=[batch * seq, heads * d]))
    return b.build()


def test_a_band_that_the_bands_above_fix_is_dropped():
    # isl completes the product's schedule below the outer band (16 b + s, 16 h + d) with a band
    # over (-s, -d), which orders nothing there; normalisation drops it
    m = build_model(lower_graph(_context_of_heads()))
    d = compute_dependences(m)
    result = schedule(m, d)
    assert respects(result.schedule, d)
    assert not any(_determined(node) for node in all_bands(result.schedule))
    (info,) = analyze(m, result.schedule)
    merged = max(range(len(info.extents)), key=lambda k: info.extents[k])
    assert info.extents[merged] == 64 and info.runs[merged] == 16  # d runs 16 steps, then h moves


def _inner_contiguity(body) -> int:
    b = GraphBuilder("g")
    body(b)
    m = build_model(lower_graph(b.build()))
    (info,) = analyze(m, schedule(m, compute_dependences(m)).schedule)
    assert info.reduction_inner
    return info.inner_contiguity


def test_a_reduction_that_would_gather_a_read_is_no_vector_loop():
    # Winograd's product (tiles of 4 x 8 positions, 512 -> 512 channels): the weight streams
    # along the reduction over input channels, the tiles move with it by rows. Vectorising
    # the reduction would gather the tiles; scored by the weight's size alone, it had kept the
    # register tile from sinking over the positions (AVX2: 55 -> 2.6 ms per call)
    assert _inner_contiguity(lambda b: b.output(b.batch_matmul(
        b.input("w", (4, 4, 64, 64)), b.input("tiles", (4, 4, 64, 32))))) == 0
    # where every read streams along the reduction it stays the best vector loop: a row sum,
    # and a product with its second operand stored transposed (an attention's q . k^T)
    assert _inner_contiguity(lambda b: b.output(b.sum(b.input("x", (8, 256)), axes=[1]))) > 0
    assert _inner_contiguity(lambda b: b.output(b.matmul(
        b.input("q", (8, 64)), b.input("k", (16, 64)), transpose_b=True))) > 0


def test_trailing_dimensions_of_one_leave_the_index_before_them_unit_stride():
    # a classifier after a global pool reads its input [N, C, 1, 1] along C: the reduction
    # streams both operands (before, the constant last index hid that, the register tile sank
    # over ten outputs read two lanes at a time: 0.95 -> 0.08 us, ResNet-18 width 16's head)
    assert _inner_contiguity(lambda b: b.output(b.matmul(
        b.reshape(b.input("x", (2, 128, 1, 1)), shape=[2, 128]), b.input("w", (10, 128)), transpose_b=True))) > 0


def test_a_padded_input_is_never_fused_into_its_conv_by_running_the_loops_backwards():
    # the padded copy is read at rows and columns ahead of the output's: with one input channel
    # isl fused it, the conv and the epilogue under the batch loop by reversing the rows and
    # columns (494 us against 19 us with the pad apart, 8 images, 1 -> 8 channels at 28 px);
    # the pad is scheduled on its own first, as it is with more input channels
    from akg.compiler import pipeline_for
    from akg.polyhedral.bands import navigate, statement_names

    for channels in (1, 3):
        b = GraphBuilder("conv")
        x, w = b.input("x", (8, channels, 28, 28)), b.input("w", (8, channels, 3, 3))
        b.output(b.relu(b.conv2d(x, w, strides=[1, 1], padding=[1, 1])))
        p = pipeline_for(b.build(), "cpu")
        result = p.schedule
        assert respects(result, compute_dependences(p.model))
        pad, conv = p.bands
        assert len(pad.statements) == 1 and len(conv.extents) == 4, p.bands
        for path in outer_band_paths(result):
            node = navigate(result, path)
            assert not sched._reversed(p.model, node, statement_names(node))



def _conv_then_pad():
    # a strided, padded conv whose output is padded: isl's band carried the pad's read of the
    # conv one row back; moved below the set of {conv, pad}, it no longer ordered them
    b = GraphBuilder("g")
    x, w = b.input("x", (2, 1, 5, 4)), b.input("w", (1, 1, 3, 1))
    c = b.conv2d(x, w, strides=[2, 2], padding=[1, 0, 1, 0])
    b.output(b.pad(c, before=[0, 0, 1, 0], after=[0, 0, 0, 1]))
    return b.build()


def test_a_set_whose_children_depend_on_each_other_does_not_respect_them():
    import islpy as isl

    program = lower_graph(_conv_then_pad())
    m = build_model(program)
    d = compute_dependences(m)
    result = schedule(m, d, "smart")
    assert respects(result.schedule, d)
    # below the outer band, the conv's statements and the pad's as a set: nothing orders the pad
    # after the conv any more; as a sequence, the conv goes first
    domain = result.schedule.get_domain()
    sets: list = []
    domain.foreach_set(sets.append)
    out = program.outputs[0].name
    pad = [x for x in sets if m.statement(x.get_tuple_name()).op.output.name == out]
    conv = [x for x in sets if m.statement(x.get_tuple_name()).op.output.name != out]
    assert len(pad) == 1 and conv
    filters = isl.UnionSetList.alloc(domain.get_ctx(), 2).add(_union(conv)).add(isl.UnionSet.from_set(pad[0]))
    below = result.schedule.get_root().child(0).child(0)
    as_set = below.insert_set(filters).get_schedule()
    as_sequence = below.insert_sequence(filters).get_schedule()
    assert respects(as_sequence, d) and not respects(as_set, d)


def _union(sets):
    import islpy as isl

    out = isl.UnionSet.from_set(sets[0])
    for x in sets[1:]:
        out = out.union(isl.UnionSet.from_set(x))
    return out
